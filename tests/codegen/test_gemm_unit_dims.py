"""GEMMs with an M or N of 1 (matrix-vector and vector-matrix products: a decode step's
x[1, K] @ W, a projection to one output) lower to the GEMM template: their output's index map
leaves the unit dim out, and the store is broadcast over the tile, whose mask keeps the one
valid row or column. Under Triton's interpreter each matches the reference, forward and
backward."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from harness import check, collect

from kernelpro_backend.lowering import lower

CASES = {
    "mm N=1": (lambda a, x: a @ x, ((64, 48), (48, 1))),
    "vector @ matrix": (lambda x, a: x @ a, ((48,), (48, 64))),
    "mm M=1": (lambda x, a: x @ a, ((1, 48), (48, 64))),
    "linear M=1 + gelu": (lambda x, w, b: F.gelu(F.linear(x, w, b)), ((1, 48), (64, 48), (64,))),
    "bmm N=1": (torch.bmm, ((3, 32, 48), (3, 48, 1))),
}


class _Fn(nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.fn(*args)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", list(CASES))
def test_unit_m_or_n_gemms_lower_and_match(name: str, dtype: torch.dtype) -> None:
    fn, shapes = CASES[name]
    gen = torch.Generator().manual_seed(0)
    inputs = [torch.randn(*s, generator=gen, dtype=dtype).requires_grad_() for s in shapes]
    subgraphs = collect(_Fn(fn), inputs, train=True)
    gemms = [sg for sg in subgraphs if sg.kind == "gemm"]
    assert {sg.graph for sg in gemms} == {"forward", "backward"}
    for sg in gemms:
        spec = lower(sg)
        assert spec.template == "gemm", sg.pattern
        check(sg, spec, seed=1)
