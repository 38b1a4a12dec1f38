"""Reductions whose columns are strided and whose rows are contiguous (a mean over a middle
dim, a sum over dim 0): the tile is many rows by a few columns, and rows spanning several dims
take their innermost one from a grid axis of its own (no `row % n`), so Triton's contiguity
analysis lays the tile out along the rows. Checked under the interpreter."""

from __future__ import annotations

import pytest
import torch
from harness import check, decomposed_subgraph

from kernelpro_backend.codegen import render
from kernelpro_backend.lowering import lower


@pytest.mark.parametrize(
    ("fn", "shape"),
    [
        (lambda x: torch.mean(x, dim=1), (3, 300, 70)),  # KernelBench L1_48's form
        (lambda x: x.amax(dim=1), (2, 130, 45)),
        (lambda x: x.sum(0), (500, 37)),  # one row dim: contiguous already
    ],
    ids=["mean_middle", "max_middle", "sum_dim0"],
)
def test_strided_columns_read_along_the_rows(fn, shape) -> None:  # type: ignore[no-untyped-def]
    sg = decomposed_subgraph(fn, torch.randn(*shape))
    seed = lower(sg)
    assert seed.knob("BLOCK_C") <= 64 and seed.knob("ROWS") >= 32  # many rows, few columns
    source = render(seed).source
    if len(shape) == 3:
        assert "inner = tl.program_id(0)" in source and "outer = tl.program_id(1)" in source
        assert f"row_mask = inner < {shape[2]}" in source
        assert f"grid = (triton.cdiv({shape[2]}, {seed.knob('ROWS')}), {shape[0]})" in source
    check(sg, seed)
    check(sg, seed.with_knobs(ROWS=8, BLOCK_C=16, num_warps=1), seed=1)  # looped, short tail


def test_a_value_per_outer_row_is_one_unmasked_scalar_load() -> None:
    # a sum over a middle dim scaled per batch (an MoE's gates, a per-sample weight): the scale
    # is indexed by `outer` alone, one scalar per program, and a block mask on a scalar
    # pointer does not compile ("Mask argument cannot be block type if pointer argument is
    # not a block"), so every candidate of such a subgraph failed
    from harness import traced_subgraph

    sg = traced_subgraph(
        lambda x, s: ((x * s[:, None, None]).sum(1),),
        [torch.randn(32, 4, 16), torch.randn(32)],
        "reduction",
    )
    seed = lower(sg)
    source = render(seed).source
    assert "outer = tl.program_id(1)" in source
    assert "tl.load(in0 + d0)" in source  # no mask (the inputs in canonical order)
    check(sg, seed)
    check(sg, seed.with_knobs(ROWS=8, BLOCK_C=2, num_warps=1), seed=1)
