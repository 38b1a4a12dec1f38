"""argmax/argmin over a dimension lower to the row template and match PyTorch exactly under
the interpreter: the first column of the extreme on ties, NaN counted as the extreme (its
first column), rows of -inf, in one block and looped over column blocks; float32 and bf16."""

from __future__ import annotations

import pytest
import torch
from harness import check, decomposed_subgraph

from kernelpro_backend.codegen import Unsupported
from kernelpro_backend.lowering import lower

_subgraph = decomposed_subgraph


def _awkward(shape, dtype):
    """Values with ties (a coarse grid), NaNs, a row of -inf and a row of +inf."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-3, 4, shape, generator=g).to(dtype)
    x[0, 2, 5] = float("nan")
    x[0, 2, 9] = float("nan")
    x[1, 0, :] = float("-inf")
    x[1, 1, :] = float("inf")
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("cols", [24, 300])
def test_arg_reductions_match_pytorch(op, cols, dtype):
    fn = (
        (lambda x: (x.argmax(-1),)) if op == "argmax" else (lambda x: (x.argmin(-1, keepdim=True),))
    )
    x = _awkward((3, 4, cols), dtype)
    sg = _subgraph(fn, x)
    spec = lower(sg)
    assert spec.template == "row_reduction"
    check(sg, spec, inputs=[x])
    check(sg, spec)  # random values
    looped = spec.with_knobs(BLOCK_C=8, ROWS=2, num_warps=1)  # several column blocks per row
    check(sg, looped, inputs=[x])
    check(sg, looped)


def test_argmax_over_every_dim_and_of_integers_stay_with_the_fallback():
    with pytest.raises(Unsupported):
        lower(_subgraph(lambda x: (x.argmax(),), torch.randn(4, 8)))
    with pytest.raises(Unsupported):
        lower(_subgraph(lambda x: (x.argmax(-1),), torch.randint(0, 9, (4, 8))))


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("cols", [24, 300])
def test_max_and_min_over_a_dim_give_values_and_indices(largest, cols):
    def fn(x):
        out = x.max(-1) if largest else torch.min(x, 1, keepdim=True)
        return (out.values * 2.0, out.indices)

    x = _awkward((3, 4, cols), torch.float32)
    x = x if largest else x.transpose(1, 2).contiguous()  # min over a middle dim of 4
    sg = _subgraph(fn, x)
    spec = lower(sg)
    check(sg, spec, inputs=[x])  # NaN rows: values NaN (PyTorch propagates it), index of the NaN
    check(sg, spec)
    looped = spec.with_knobs(BLOCK_C=8 if largest else 2, ROWS=2, num_warps=1)
    check(sg, looped, inputs=[x])
