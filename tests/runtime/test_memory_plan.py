"""The memory planner: how many evaluations of a subgraph fit next to the caller's tensors,
and a clear refusal when not even one does."""

from __future__ import annotations

import pytest

from kernelpro_backend.runtime.memory import CONTEXT_BYTES, Footprint, GiB, plan_memory

SOFTMAX_4096x262144 = [((4096, 262144), (262144, 1), "float32")]  # 4 GiB in, 4 GiB out


def test_footprint_counts_copies_float64_reference_and_outputs():
    fp = Footprint.of(SOFTMAX_4096x262144, SOFTMAX_4096x262144)
    # while the reference runs: 3 x 4 GiB inputs (previous, fresh, scaled), 8 GiB float64
    # inputs, 2 x 8 GiB float64 output and intermediate, 2 x 4 GiB native output: 44 GiB
    # (measured: 44.6 GiB with the context on H100), over the 32 GiB while the candidate runs
    # (2 x 4 inputs, 8 + 4 references, 3 x 4 outputs)
    assert fp.validate_bytes == (3 * 4 + 8 + 2 * 8 + 2 * 4) * GiB + CONTEXT_BYTES
    assert fp.compile_bytes == 8 * GiB + CONTEXT_BYTES


def test_one_validates_at_a_time_and_the_others_fit_while_compiling():
    fp = Footprint.of(SOFTMAX_4096x262144, SOFTMAX_4096x262144)
    # validating 44.75 GiB, compiling 8.75 GiB each, 90% of what is free is used
    assert plan_memory(fp, 50 * GiB, workers=4).concurrent == 1  # 44.75 + 8.75 > 45
    assert plan_memory(fp, 60 * GiB, workers=4).concurrent == 2  # 44.75 + 8.75 <= 54
    small = Footprint.of([((64, 64), (64, 1), "float32")], [((64, 64), (64, 1), "float32")])
    assert plan_memory(small, 1 * GiB, workers=4).concurrent == 1  # contexts, not tensors
    assert plan_memory(small, 8 * GiB, workers=4).concurrent == 4


def test_without_room_for_float64_candidates_are_proved_against_the_native_reference():
    fp = Footprint.of(SOFTMAX_4096x262144, SOFTMAX_4096x262144)
    # no float64: 3 x 4 GiB inputs and the native output twice (20), or the inputs and their
    # copy, the reference and three candidate outputs (24)
    assert fp.native_bytes == (2 * 4 + 4 * 4) * GiB + CONTEXT_BYTES
    plan = plan_memory(fp, 30 * GiB, workers=4)
    assert (plan.concurrent, plan.exact) == (1, False)
    assert plan.message == (
        "a float64 reference needs 44.8 GiB, 30.0 GiB free: candidates are proved against "
        "PyTorch's result in the subgraph's own dtype"
    )
    assert plan_memory(fp, 50 * GiB, workers=4).exact  # float64 whenever it fits


def test_a_subgraph_that_cannot_fit_is_refused_with_what_it_needs():
    fp = Footprint.of(SOFTMAX_4096x262144, SOFTMAX_4096x262144)
    plan = plan_memory(fp, 20 * GiB, workers=4)
    assert plan.concurrent == 0
    assert plan.message == "needs 24.8 GiB to prove a candidate, 20.0 GiB free; kept the fallback"


@pytest.mark.parametrize("workers", [1, 3])
def test_never_more_than_the_workers(workers):
    tiny = Footprint(1, 1)
    assert plan_memory(tiny, 100 * GiB, workers).concurrent == workers
