"""Validation in-process on CPU: honest kernels pass, every CPU-runnable gaming case is
rejected with its reason named (Triton kernels run in the interpreter)."""

import tempfile
from pathlib import Path

import pytest
from gaming_corpus import CASES, HONEST

from kernelpro_backend.runtime import BaselineCandidate, EvalStatus, Job, SourceCandidate
from kernelpro_backend.runtime.worker import WorkerState, evaluate_job


@pytest.fixture(scope="module")
def state():
    return WorkerState(Path(tempfile.mkdtemp(prefix="kernelpro-test-")))


def source(text):
    return SourceCandidate("triton", text, "entry")


def test_honest_triton_kernel_is_ok_and_timed(pointwise_subgraph, state):
    result = evaluate_job(Job.from_subgraph(pointwise_subgraph, source(HONEST)), state)
    assert result.status is EvalStatus.OK, result.message
    assert result.median_ms > 0 and result.spread_ms >= 0 and len(result.times_ms) >= 10
    assert result.details["worst_error_ratio"] <= 1.0
    assert [t["scale"] for t in result.details["trials"]] == [1.0, 16.0, 1.0]
    assert result.sol_ms is None  # no ceilings on CPU


@pytest.mark.parametrize("case", [c for c in CASES if not c.cuda_only], ids=lambda c: c.name)
def test_gaming_case_is_rejected_with_its_reason(case, pointwise_subgraph, state):
    result = evaluate_job(Job.from_subgraph(pointwise_subgraph, source(case.source)), state)
    assert result.status.value == case.status, result.message
    assert case.rejected_for_reason(result.message), result.message
    assert result.median_ms is None


def test_eager_baseline_is_ok(softmax_subgraph, state):
    result = evaluate_job(Job.from_subgraph(softmax_subgraph, BaselineCandidate("eager")), state)
    assert result.status is EvalStatus.OK, result.message
    assert result.details["candidate"] == {"kind": "baseline", "name": "eager"}


def test_torch_kernel_with_another_reduction_order_passes_softmax(softmax_subgraph, state):
    text = (
        "import torch\n"
        "def entry(x):\n"
        "    e = torch.exp(x - x.max(-1, keepdim=True).values)\n"
        "    return [e / e.flip(-1).cumsum(-1)[..., -1:]]\n"
    )
    result = evaluate_job(Job.from_subgraph(softmax_subgraph, source(text)), state)
    assert result.status is EvalStatus.OK, result.message


def test_wrong_softmax_names_output_and_position(softmax_subgraph, state):
    text = "import torch\ndef entry(x):\n    return [torch.softmax(x * 1.001, -1)]\n"
    result = evaluate_job(Job.from_subgraph(softmax_subgraph, source(text)), state)
    assert result.status is EvalStatus.WRONG
    assert result.details["output"] == 0 and len(result.details["index"]) == 2
    assert result.details["max_abs_error"] > 1e-4


def test_syntax_error_is_a_compile_error(pointwise_subgraph, state):
    result = evaluate_job(Job.from_subgraph(pointwise_subgraph, source("def entry(:\n")), state)
    assert result.status is EvalStatus.COMPILE_ERROR
    assert "does not import" in result.message


def test_missing_entry_is_a_compile_error(pointwise_subgraph, state):
    job = Job.from_subgraph(pointwise_subgraph, SourceCandidate("triton", HONEST, "main"))
    result = evaluate_job(job, state)
    assert result.status is EvalStatus.COMPILE_ERROR and "'main'" in result.message


def test_exception_in_kernel_is_a_crash_with_traceback(pointwise_subgraph, state):
    text = "def entry(x, y):\n    raise IndexError('block 3 out of range')\n"
    result = evaluate_job(Job.from_subgraph(pointwise_subgraph, source(text)), state)
    assert result.status is EvalStatus.CRASHED
    assert "block 3 out of range" in result.message and "Traceback" in result.details["traceback"]


def test_cuda_source_without_launch_header_is_a_compile_error(pointwise_subgraph, state):
    job = Job.from_subgraph(
        pointwise_subgraph, SourceCandidate("cuda", "__global__ void k(){}", "k")
    )
    result = evaluate_job(job, state)
    assert result.status is EvalStatus.COMPILE_ERROR and "kernelpro-launch" in result.message


def test_wrong_output_count_and_shape(pointwise_subgraph, state):
    two = (
        "import torch\ndef entry(x, y):\n    o = torch.relu(x * y + 1)\n    return [o, o.clone()]\n"
    )
    result = evaluate_job(Job.from_subgraph(pointwise_subgraph, source(two)), state)
    assert result.status is EvalStatus.WRONG and "2 outputs" in result.message
    flat = "import torch\ndef entry(x, y):\n    return [torch.relu(x * y + 1).flatten()]\n"
    result = evaluate_job(Job.from_subgraph(pointwise_subgraph, source(flat)), state)
    assert result.status is EvalStatus.WRONG and "shape" in result.message


def test_job_needs_three_trials(pointwise_subgraph):
    with pytest.raises(ValueError, match=">= 3"):
        Job.from_subgraph(pointwise_subgraph, source(HONEST), trials=2)


def test_job_accepts_a_kernel_spec_like_object(pointwise_subgraph):
    class FakeSpec:
        def to_json(self):
            return '{"template": "pointwise"}'

    job = Job.from_subgraph(pointwise_subgraph, FakeSpec())
    assert job.candidate.describe() == {"kind": "spec", "spec": '{"template": "pointwise"}'}
    assert job.work is not None and job.work.bytes == 3 * 16 * 24 * 4


def test_without_a_float64_reference_the_native_one_still_proves(softmax_subgraph, state):
    """Where the float64 reference does not fit the GPU (runtime/memory.py) the job proves
    against the reference module's own-dtype result: the honest kernel passes, the wrong one
    is still caught, and the result says which reference it met."""
    import dataclasses

    honest = "import torch\ndef entry(x):\n    return [torch.softmax(x, -1)]\n"
    wrong = "import torch\ndef entry(x):\n    return [torch.softmax(x * 1.001, -1)]\n"
    for text, status in ((honest, EvalStatus.OK), (wrong, EvalStatus.WRONG)):
        job = Job.from_subgraph(softmax_subgraph, source(text))
        native = evaluate_job(dataclasses.replace(job, exact_reference=False), state)
        assert native.status is status, native.message
        assert native.details["reference"] == "native"
    exact = evaluate_job(Job.from_subgraph(softmax_subgraph, source(honest)), state)
    assert exact.details["reference"] == "float64"
