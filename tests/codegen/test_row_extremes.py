"""A row's max/min is one reduction that propagates NaN as PyTorch's does (a combine function
with `propagate_nan`, not tl.max plus a reduction of NaN flags), and a row gather of an input
is one load per row at the row's index (not a masked sum over the row). Under the interpreter
both match PyTorch: rows holding NaN, rows of -inf/+inf, the tile covering the row."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from harness import check, decomposed_subgraph

from kernelpro_backend.codegen import render
from kernelpro_backend.lowering import lower
from kernelpro_backend.runtime.spec_kernel import build_kernel

_subgraph = decomposed_subgraph


def _with_nans(rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(0)).to(dtype)
    x[1, 7] = float("nan")
    x[2, :] = float("-inf")
    x[3, :] = float("inf")
    x[4, 0] = float("nan")
    x[4, cols - 1] = float("inf")
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("op", ["amax", "amin", "softmax"])
@pytest.mark.parametrize("block", [None, 32], ids=["one-block", "looped"])
def test_one_reduction_per_extreme_propagates_nan(
    op: str, dtype: torch.dtype, block: int | None
) -> None:
    x = _with_nans(8, 100, dtype)
    fns = {
        "amax": lambda x: (x.amax(-1),),
        "amin": lambda x: (x.amin(-1, keepdim=True),),
        "softmax": lambda x: (torch.softmax(x, -1),),
    }
    sg = _subgraph(fns[op], x)
    spec = lower(sg) if block is None else lower(sg).with_knobs(BLOCK_C=block)
    source = render(spec).source
    assert "propagate_nan=tl.PropagateNan.ALL" in source and "!= t" not in source
    assert ("for c0 in range(" in source) == (block is not None)
    check(sg, spec, inputs=[x])
    (got,), want = build_kernel(spec)(x), fns[op](x)[0]
    assert want.isnan().any() and got.isnan().equal(want.isnan())  # NaN where PyTorch has it


@pytest.mark.parametrize("block", [None, 16], ids=["one-block", "looped"])
def test_cross_entropy_picks_the_target_with_one_load_per_row(block: int | None) -> None:
    x = _with_nans(6, 50, torch.float32)
    t = torch.tensor([3, 7, 0, 49, 0, -100])
    sg = _subgraph(lambda x, t: (F.cross_entropy(x, t, reduction="none"),), x, t)
    spec = lower(sg) if block is None else lower(sg).with_knobs(BLOCK_C=block)
    source = render(spec).source
    assert "bitcast=True" not in source  # no masked sum of the row's bits
    assert ">= 0) & (" in source  # the per-row load, masked to the row
    check(sg, spec, inputs=[x, t])
    check(sg, spec, seed=3)
