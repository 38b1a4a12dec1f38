"""The CUTLASS 3 convolutions on the GPU: forward, input gradient and weight gradient in bf16,
forward and input gradient in float32 as TF32, on ResNet-50-like layers (3x3 and 1x1, stride
1 and 2, an odd spatial size), each against float64 no worse than eager's own error (cuDNN,
TF32 for float32 as PyTorch allows convolutions by default); a channel count that is not a
multiple of 16 bytes is refused by the kernel (code 1), and a strided input gradient by the
host (sm90's dgrad covers unit strides), not computed wrong."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
import torch.nn.functional as F
from helpers import HOPPER_CUTLASS

from kernelpro_backend.codegen.templates.cutlass_conv import ENTRY_POINTS, CutlassConv
from kernelpro_backend.runtime.cuda.host import compile_library
from kernelpro_backend.runtime.cuda.host_conv import ConvProblem, HostConv
from kernelpro_backend.runtime.errors import CandidateLoadError

pytestmark = HOPPER_CUTLASS

CL = torch.channels_last
CONFIGS = {
    ("fprop", "bfloat16"): CutlassConv("fprop", "bfloat16"),
    ("dgrad", "bfloat16"): CutlassConv("dgrad", "bfloat16"),
    ("wgrad", "bfloat16"): CutlassConv("wgrad", "bfloat16"),
    ("fprop", "float32"): CutlassConv("fprop", "float32", tile=(128, 128, 32)),
    ("dgrad", "float32"): CutlassConv("dgrad", "float32", tile=(128, 128, 32)),
}
# (n, c, h, w, k, r, s, padding, stride)
LAYERS = {
    "3x3": (8, 64, 56, 56, 64, 3, 3, 1, 1),
    "1x1": (8, 256, 28, 28, 128, 1, 1, 0, 1),
    "3x3-s2-odd": (4, 128, 29, 31, 256, 3, 3, 1, 2),
}


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):  # type: ignore[no-untyped-def]
    """Every library built at once (one nvcc each, about a minute)."""
    folder = tmp_path_factory.mktemp("cutlass-conv")

    def build(config: CutlassConv) -> object:
        return compile_library(
            config.source_text(), "sm_90a", library_dir=folder, symbols=ENTRY_POINTS,
            timeout_s=900,
        )  # fmt: skip

    at_once = max(1, min(len(CONFIGS), (os.cpu_count() or 2) // 2))
    with ThreadPoolExecutor(at_once) as pool:
        paths = list(pool.map(build, CONFIGS.values()))
    return {key: HostConv(path, key[0]) for key, path in zip(CONFIGS, paths, strict=True)}


def _operands(layer: str, dtype: torch.dtype):  # type: ignore[no-untyped-def]
    n, c, h, w, k, r, s, pad, stride = LAYERS[layer]
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(n, c, h, w, device="cuda", generator=g).to(dtype).contiguous(memory_format=CL)
    wt = (torch.randn(k, c, r, s, device="cuda", generator=g) / (c * r * s) ** 0.5).to(dtype)
    wt = wt.contiguous(memory_format=CL)
    problem = ConvProblem.of(x.shape, wt.shape, (pad, pad), (stride, stride), (1, 1))
    p, q = problem.output_hw
    dy = torch.randn(n, k, p, q, device="cuda", generator=g).to(dtype).contiguous(memory_format=CL)
    return x, wt, dy, problem


def _reference(op: str, x, wt, dy, problem):  # type: ignore[no-untyped-def]
    """The operator in the operands' dtype (eager: cuDNN) and in float64."""
    pad, stride = problem.padding, problem.stride

    def run(x, wt, dy):  # type: ignore[no-untyped-def]
        if op == "fprop":
            return F.conv2d(x, wt, padding=pad, stride=stride)
        grads = torch.ops.aten.convolution_backward(
            dy, x, wt, None, stride, pad, (1, 1), False, (0, 0), 1,
            (op == "dgrad", op == "wgrad", False),
        )  # fmt: skip
        return grads[0] if op == "dgrad" else grads[1]

    return run(x, wt, dy), run(x.double(), wt.double(), dy.double())


@pytest.mark.parametrize("layer", list(LAYERS))
@pytest.mark.parametrize("key", list(CONFIGS), ids=lambda k: "-".join(k))
def test_matches_pytorch(key: tuple[str, str], layer: str, libraries) -> None:  # type: ignore[no-untyped-def]
    op, dtype_name = key
    dtype = getattr(torch, dtype_name)
    x, wt, dy, problem = _operands(layer, dtype)
    act, flt = {"fprop": (x, wt), "dgrad": (dy, wt), "wgrad": (dy, x)}[op]
    if op == "dgrad" and problem.stride != (1, 1):
        with pytest.raises(CandidateLoadError, match="unit strides"):
            libraries[key](act, flt, problem)
        return
    got = libraries[key](act, flt, problem)
    eager, exact = _reference(op, x, wt, dy, problem)
    assert got.shape == eager.shape and got.dtype == dtype
    err = (got.double() - exact).abs().max()
    eager_err = (eager.double() - exact).abs().max()
    assert err <= 2 * eager_err + 1e-3 * exact.abs().max(), (float(err), float(eager_err))


def test_unaligned_channels_are_refused(libraries) -> None:  # type: ignore[no-untyped-def]
    x = torch.randn(2, 3, 32, 32, device="cuda").bfloat16().contiguous(memory_format=CL)
    wt = torch.randn(64, 3, 7, 7, device="cuda").bfloat16().contiguous(memory_format=CL)
    problem = ConvProblem.of(x.shape, wt.shape, (3, 3), (2, 2), (1, 1))
    with pytest.raises(CandidateLoadError, match="returned 1"):
        libraries[("fprop", "bfloat16")](x, wt, problem)
