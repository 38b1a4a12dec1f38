"""Shared test set-up: the `gpu` marker skips cleanly without CUDA; helpers to train models."""

from __future__ import annotations

import os

import pytest
import torch

# Without a GPU, Triton kernels run on CPU tensors through Triton's interpreter. Set it before
# triton is imported (spawned workers inherit it). On a GPU machine the real compiler runs.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def _interpreter_rounds_bf16_to_nearest() -> None:
    """Triton's interpreter truncates float32 -> bfloat16 (its cast passes no rounding mode);
    the GPU, like PyTorch, rounds to nearest even. A truncated exp argument (cross-entropy's
    gradient rounds it to bf16) moves the result by up to 4%, so kernels compared with PyTorch
    under the interpreter would differ for the interpreter's sake. Cast as the GPU does."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder.cast_impl, "rounds_bf16", False):
        return
    original = builder.cast_impl

    def cast_impl(self, src, dst_type):  # type: ignore[no-untyped-def]
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            f32 = torch.from_numpy(np.array(src.data, dtype=np.float32, copy=True))
            bits = f32.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
            return interpreter.TensorHandle(bits.reshape(np.shape(src.data)), dst_type.scalar)
        return original(self, src, dst_type)

    cast_impl.rounds_bf16 = True  # type: ignore[attr-defined]
    builder.cast_impl = cast_impl


if os.environ.get("TRITON_INTERPRET") == "1":
    _interpreter_rounds_bf16_to_nearest()


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the device machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
