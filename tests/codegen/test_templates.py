"""Every template under Triton's interpreter against the reference subgraph: hand-written
modules at odd sizes, float32 and bfloat16, forward and backward graphs, fresh inputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from harness import check, collect, traced_subgraph
from models import cases

from kernelpro_backend.codegen import knob_space
from kernelpro_backend.lowering import lower

DTYPES = [torch.float32, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(cases(torch.float32)))
def test_every_subgraph_of_the_model_lowers_and_matches(name: str, dtype: torch.dtype) -> None:
    model, inputs = cases(dtype)[name]
    subgraphs = collect(model, inputs)
    assert {sg.graph for sg in subgraphs} == {"forward", "backward"}
    for seed, sg in enumerate(subgraphs):
        check(sg, seed=seed)  # raises Unsupported if any subgraph has no template


@pytest.mark.parametrize("name", ["softmax", "layer_norm", "cross_entropy", "reductions"])
def test_long_rows_loop_over_column_blocks(name: str) -> None:
    model, inputs = cases(torch.float32)[name]
    for sg in collect(model, inputs):
        spec = lower(sg)
        if spec.template == "row_reduction":
            looped = spec.with_knobs(BLOCK_C=min(knob_space(spec)["BLOCK_C"]), num_warps=1)
            check(sg, looped, seed=3)


def test_gemm_schedules_compute_the_same() -> None:
    model, inputs = cases(torch.float32)["linear_epilogues"]
    sg = next(s for s in collect(model, inputs, train=False) if s.kind == "gemm")
    spec = lower(sg)
    for knobs in (
        dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=1, num_warps=2),
        dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, PERSISTENT=True, num_warps=2),
        dict(BLOCK_M=32, BLOCK_N=16, BLOCK_K=32, GROUP_M=4, num_stages=2, num_warps=2),
    ):
        check(sg, spec.with_knobs(**knobs), seed=len(knobs))


def test_split_k_accumulates_a_plain_gemm() -> None:
    a, b = torch.randn(19, 67), torch.randn(67, 23)
    sg = traced_subgraph(torch.mm, (a, b), "gemm")
    spec = lower(sg).with_knobs(SPLIT_K=2, BLOCK_K=16, BLOCK_M=16, BLOCK_N=16, num_warps=2)
    check(sg, spec)


def test_transposed_operands_are_read_through_strides() -> None:
    a, b = torch.randn(31, 19).t(), torch.randn(23, 31).t()
    sg = traced_subgraph(lambda x, y: torch.mm(x, y).tanh(), (a, b), "gemm")
    assert all(stride[0] == 1 for _, stride, _ in sg.input_meta)  # both column-major
    check(sg)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_attention_forward(dtype: torch.dtype, causal: bool) -> None:
    q, k, v = (torch.randn(2, 3, 37, 24, dtype=dtype) for _ in range(3))

    def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, causal, scale=0.3
        )
        return out, lse

    sg = traced_subgraph(sdpa, (q, k, v), "attention")
    spec = lower(sg)
    check(sg, spec)
    check(sg, spec.with_knobs(BLOCK_M=16, BLOCK_N=16, num_warps=2), seed=1)


def test_attention_through_the_public_op() -> None:
    q, k, v = (
        torch.randn(1, 2, 19, 40).transpose(1, 2).contiguous().transpose(1, 2) for _ in range(3)
    )
    sg = traced_subgraph(
        lambda a, b, c: (F.scaled_dot_product_attention(a, b, c),), (q, k, v), "attention"
    )
    check(sg)


def test_pointwise_op_table() -> None:
    from models import PointwiseZoo

    x, y = (torch.randn(5, 37, requires_grad=True) for _ in range(2))
    subgraphs = collect(PointwiseZoo(), (x, y))
    assert {sg.graph for sg in subgraphs} == {"forward", "backward"}
    for seed, sg in enumerate(subgraphs):
        check(sg, seed=seed)


def test_gemm_row_reduction_wider_than_a_tile_is_unsupported() -> None:
    from kernelpro_backend.codegen import Unsupported

    x, w = torch.randn(8, 16), torch.randn(16, 300)
    sg = traced_subgraph(lambda a, b: (torch.mm(a, b).amax(-1, keepdim=True),), (x, w), "gemm")
    with pytest.raises(Unsupported, match="BLOCK_N=512"):
        lower(sg)


def test_reductions_ready_together_share_a_pass_over_long_rows() -> None:
    from kernelpro_backend.codegen import render

    def stats(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        # sum, max and min read only x: one pass; the centred sum needs the mean: a second one
        s = x.sum(-1, keepdim=True)
        centred = ((x - s / x.shape[-1]) ** 2).sum(-1, keepdim=True)
        return s, x.amax(-1, keepdim=True), x.amin(-1, keepdim=True), centred

    sg = traced_subgraph(stats, (torch.randn(7, 100),), "reduction")
    looped = lower(sg).with_knobs(BLOCK_C=16, ROWS=2, num_warps=1)
    assert render(looped).source.count("for c0 in range(") == 2
    check(sg, looped)
