"""`kernelpro::cutlass_conv`: CUTLASS's Hopper convolution as a torch custom op, so that a
"conv_cutlass" kernel is traced into Inductor's graph and called from its generated code like
an extern kernel (the CUTLASS GEMM's op, cutlass_gemm.py, is the model).

`cutlass_conv(act, flt, problem, digest, operator)`: one operator of a dense 2-D convolution
(groups 1), operands and result packed channels-last in torch's shapes — "fprop": y = conv2d(x,
w) from (x, w); "dgrad": dx from (dy, w); "wgrad": dw from (dy, x) — `problem` the forward's
(n, h, w, c, k, r, s, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w), through the shared
library of the CUDA C++ source registered under `digest` (runtime/cuda/host_conv.library_conv
builds or loads it). A generated module registers its source when it is imported.

Owns: the op and its fake (shape) implementation; sources are registered with the GEMM op's
`register` (one registry, cutlass_gemm.py), re-exported here for the generated modules.
Must not: render sources (codegen/cutlass_conv_match.py does) or compile them.
"""

from __future__ import annotations

import torch

from ..runtime.cuda.host_conv import ConvProblem, library_conv
from .cutlass_gemm import register, source_of
from .fast_op import fast_op

__all__ = ["cutlass_conv", "register"]


@fast_op("kernelpro::cutlass_conv")
def cutlass_conv(
    act: torch.Tensor, flt: torch.Tensor, problem: list[int], digest: str, operator: str
) -> torch.Tensor:
    source = source_of(digest, "kernelpro::cutlass_conv")
    return library_conv(source, operator)(act, flt, ConvProblem.from_args(problem))


@cutlass_conv.register_fake
def _fake(act, flt, problem, digest, operator):  # type: ignore[no-untyped-def]
    shape = ConvProblem.from_args(problem).result_shape(operator)
    return torch.empty(shape, dtype=act.dtype, device=act.device, memory_format=torch.channels_last)
