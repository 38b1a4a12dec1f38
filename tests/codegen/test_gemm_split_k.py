"""Split-K GEMMs: SPLIT_K programs share a tile's K loop, each storing a float32 partial, and a
second kernel adds the partials in split order and runs the epilogue. Run under the Triton
interpreter against the reference subgraph, and through the evaluator. (On the GPU, atomic adds
of more than two partials in a float32 output would fail the evaluator's determinism check; the
interpreter runs programs one at a time, so these tests cannot show that difference.)"""

import tempfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from harness import bias_gelu_subgraph, check, traced_subgraph

from kernelpro_backend.codegen import IllegalSpec, knob_space, render
from kernelpro_backend.codegen.knobs import SPLIT_K_PARTIAL_BYTES
from kernelpro_backend.lowering import lower
from kernelpro_backend.runtime import EvalStatus, Job, SpecCandidate
from kernelpro_backend.runtime.worker import WorkerState, evaluate_job

SMALL = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, num_warps=2, num_stages=2)


@pytest.mark.parametrize("split", [2, 4, 16])
def test_bias_gelu_epilogue_after_the_partials(split: int) -> None:
    sg = bias_gelu_subgraph(19, 16 * split + 5, 23, torch.float32)  # odd M, N and K
    spec = check(sg, lower(sg).with_knobs(**SMALL, SPLIT_K=split), seed=split)
    source = render(spec).source
    assert "def combine(" in source and "atomic" not in source
    assert "static_range(1, SPLIT_K)" in source


def test_batched_with_a_residual_and_a_bfloat16_output() -> None:
    a, b = torch.randn(3, 20, 72, dtype=torch.bfloat16), torch.randn(3, 72, 24).bfloat16()
    r = torch.randn(3, 20, 24, dtype=torch.bfloat16)
    sg = traced_subgraph(lambda x, y, z: (torch.bmm(x, y) + z,), (a, b, r), "gemm")
    check(sg, lower(sg).with_knobs(**SMALL, SPLIT_K=4), seed=3)


def test_row_reductions_and_sliced_epilogues_run_in_the_combine_kernel() -> None:
    x, w = torch.randn(24, 80), torch.randn(80, 32)

    def normalised(a: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor]:
        e = torch.exp(torch.mm(a, c) - 1.0)
        return (e / e.sum(-1, keepdim=True),)

    reduced = traced_subgraph(normalised, (x, w), "gemm")
    check(reduced, lower(reduced).with_knobs(**{**SMALL, "BLOCK_N": 32}, SPLIT_K=2), seed=4)
    sg = bias_gelu_subgraph(20, 96, 64, torch.float32)
    sliced = lower(sg).with_knobs(**{**SMALL, "BLOCK_N": 64}, SPLIT_K=4, EPILOGUE_SUBTILE=2)
    check(sg, sliced, seed=5)


def test_tma_loads_split_k() -> None:
    a, b = torch.randn(32, 128), torch.randn(128, 48)
    sg = traced_subgraph(lambda x, y: (torch.mm(x, y).relu(),), (a, b), "gemm")
    check(sg, lower(sg).with_knobs(**SMALL, LOADS="tma", SPLIT_K=8), seed=6)


def test_sixteen_partials_are_bit_identical_run_to_run() -> None:
    """Through the evaluator: proved against float64, twice on the same inputs, and timed."""
    sg = bias_gelu_subgraph(16, 16 * 16, 16, torch.float32)
    spec = lower(sg).with_knobs(**SMALL, SPLIT_K=16)
    state = WorkerState(Path(tempfile.mkdtemp(prefix="kernelpro-test-")))
    result = evaluate_job(Job.from_subgraph(sg, SpecCandidate(spec.to_json())), state)
    assert result.status is EvalStatus.OK, result.message
    assert result.median_ms is not None and result.median_ms > 0


def test_split_k_is_legal_with_epilogues_and_illegal_where_it_cannot_work() -> None:
    sg = bias_gelu_subgraph(19, 64, 23, torch.float32)
    spec = lower(sg).with_knobs(**SMALL)
    assert knob_space(spec)["SPLIT_K"] == (1, 2, 4)  # 8 x BLOCK_K=16 > K=64
    with pytest.raises(IllegalSpec, match="SPLIT_K=8 x BLOCK_K=16 exceeds K=64"):
        spec.with_knobs(SPLIT_K=8)
    with pytest.raises(IllegalSpec, match="persistent program"):
        spec.with_knobs(SPLIT_K=2, PERSISTENT=True)
    # the partials of a large output: 16 x 2048 x 1024 x 4 bytes = 128 MiB
    big = bias_gelu_subgraph(2048, 4096, 1024, torch.float32)
    big_spec = lower(big).with_knobs(**SMALL)
    assert 16 * 2048 * 1024 * 4 > SPLIT_K_PARTIAL_BYTES >= 4 * 2048 * 1024 * 4
    big_spec.with_knobs(SPLIT_K=4)
    with pytest.raises(IllegalSpec, match="128 MiB of float32 partials"):
        big_spec.with_knobs(SPLIT_K=16)


def test_a_gemm_without_split_k_renders_one_kernel() -> None:
    sg = bias_gelu_subgraph(19, 40, 23, torch.float32)
    source = render(lower(sg).with_knobs(**SMALL)).source
    assert "def combine(" not in source and "partials" not in source
    check(sg, lower(sg).with_knobs(**SMALL), seed=7)


def test_split_k_matches_a_gemm_with_a_transposed_operand() -> None:
    """The backward's weight gradient: X^T @ dY, K the long token axis, a small output."""
    x, dy = torch.randn(160, 24), torch.randn(160, 20)
    sg = traced_subgraph(lambda a, b: (torch.mm(a.t(), b),), (x, dy), "gemm")
    check(sg, lower(sg).with_knobs(**SMALL, SPLIT_K=8), seed=8)
    sg_act = traced_subgraph(lambda a, b: (F.silu(torch.mm(a.t(), b)),), (x, dy), "gemm")
    check(sg_act, lower(sg_act).with_knobs(**SMALL, SPLIT_K=4), seed=9)
