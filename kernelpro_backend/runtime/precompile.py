"""Compiling a generated Triton kernel before it may touch the GPU.

Owns: `precompile(kernel, input_meta, device)`: calls a codegen kernel's entry with empty
inputs of the real shapes and a launcher that runs Triton's `warmup` (compile and load, no
launch) instead of the kernel. The worker does this outside the pool's GPU lock, so one
worker compiles (CPU work, 0.3-3 s a kernel) while another validates and times on the GPU.
Must not: launch a kernel or compare anything; a kernel it cannot precompile is compiled on
its first launch as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

TensorMeta = tuple[tuple[int, ...], tuple[int, ...], str]


class _WarmupLaunch:
    """`_launch(kernel)[grid](*args, **kw)` that compiles instead of launching."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            return self.kernel.warmup(*args, grid=grid, **kwargs)

        return run


def _empty_inputs(input_meta: Sequence[TensorMeta], device: torch.device) -> list[torch.Tensor]:
    return [
        torch.empty_strided(shape, stride, dtype=getattr(torch, dtype), device=device)
        for shape, stride, dtype in input_meta
    ]


def precompile(kernel: Any, input_meta: Sequence[TensorMeta], device: torch.device) -> bool:
    """True when every Triton kernel of `kernel` was compiled without a launch; False when
    `kernel` is not a codegen kernel with a `_launch` hook (free-form sources, baselines,
    CUDA) or is not on a GPU. Compile errors propagate, as they would on the first launch."""
    entry = getattr(kernel, "entry", None)
    if device.type != "cuda" or entry is None or not hasattr(kernel, "spec"):
        return False
    if not getattr(kernel, "precompiles", True):  # no Triton kernel: its entry would launch
        return False
    inputs = _empty_inputs(input_meta, device)
    with torch.no_grad():
        entry(*inputs, _launch=_WarmupLaunch)
    del inputs
    return True
