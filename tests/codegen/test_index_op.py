"""Ranges made inside a subgraph (aten.arange, prims.iota) lower to the "index" op: the
element's index expression computed from the kernel's coordinates, not a tensor read. Under
Triton's interpreter against the reference subgraph: a pointwise program, and a row reduction
whose column loop walks the index block by block."""

from __future__ import annotations

import torch
from harness import check, cluster_alternatives, decomposed_subgraph, traced_subgraph

from kernelpro_backend.lowering import lower


def _index_ops(spec) -> list:  # type: ignore[no-untyped-def]
    return [args for op, args, _ in spec.ops if op == "index"]


def test_arange_in_a_pointwise_program_is_computed():
    def fn(x: torch.Tensor) -> torch.Tensor:
        n = x.shape[-1]
        return x * torch.arange(n) + torch.arange(2, 2 + 3 * n, 3, dtype=torch.float32)

    sg = traced_subgraph(fn, (torch.randn(5, 70),), "pointwise")
    assert all(dt == "float32" for _, _, dt in sg.input_meta)  # no index tensor is read
    spec = lower(sg)
    assert len(_index_ops(spec)) == 2
    check(sg, spec)


def test_a_row_reduction_weighted_by_the_column_index():
    def fn(x: torch.Tensor) -> torch.Tensor:
        return (x * torch.arange(x.shape[-1])).sum(-1, keepdim=True)

    sg = traced_subgraph(fn, (torch.randn(6, 300),), "reduction")
    spec = lower(sg)
    assert spec.template == "row_reduction" and len(_index_ops(spec)) == 1
    check(sg, spec)
    check(sg, spec.with_knobs(BLOCK_C=64, ROWS=2, num_warps=1), seed=1)  # looped columns


def test_a_causal_mask_from_two_ranges_in_a_softmax(tmp_path) -> None:
    """Hand-written attention's causal mask from aranges (query index >= key index): one range
    along the rows, one along the columns, both computed; the row-resident alternative (rows
    of 1024 or more) takes the row's part from its coordinates and the column's as its column."""
    from kernelpro_backend.codegen import render
    from kernelpro_backend.runtime.cuda.compile import compile_cuda, find_nvcc

    def fn(s: torch.Tensor) -> torch.Tensor:
        t = s.shape[-1]
        keep = torch.arange(t)[:, None] >= torch.arange(t)[None, :]
        return s.masked_fill(~keep, float("-inf")).softmax(-1)

    sg = decomposed_subgraph(fn, torch.randn(2, 40, 40))
    spec = lower(sg)
    assert len(_index_ops(spec)) == 2
    check(sg, spec)
    check(sg, spec.with_knobs(BLOCK_C=16, ROWS=2, num_warps=1), seed=1)
    (alt,) = cluster_alternatives(lower(decomposed_subgraph(fn, torch.randn(1, 1024, 1024))))
    rendered = render(alt)
    assert " = col;" in rendered.source and "(long long)(" in rendered.source
    if find_nvcc() is not None:
        cubin = compile_cuda(
            rendered.source, "sm_90a", kernels=(rendered.entry,), cubin_dir=tmp_path
        )
        assert cubin.data[:4] == b"\x7fELF"
