"""The worker's two-stage feedback on CPU (Triton's interpreter): an OK candidate comes back
with its roofline findings and says why ptxas/sass had nothing to read; a failing feedback
never fails the candidate; baselines get none."""

import dataclasses
import tempfile
from pathlib import Path

import pytest
from gaming_corpus import HONEST

import kernelpro_backend.runtime.feedback as feedback
from kernelpro_backend.profilers import Roofs
from kernelpro_backend.runtime import BaselineCandidate, EvalStatus, Job, SourceCandidate
from kernelpro_backend.runtime.feedback import FeedbackPlan
from kernelpro_backend.runtime.worker import WorkerState, evaluate_job
from kernelpro_backend.search import codegen_space

# A slow memory roof and no launch latency: the interpreter's milliseconds are under-utilised,
# a class that ptxas and sass are both called for.
PLAN = FeedbackPlan(
    Roofs(bytes_per_s=1e9, flops_per_s=1e9, launch_latency_ms=1e-6), tools=("ptxas", "sass")
)
INTERPRETER = "no compiled Triton kernels (interpreter"


@pytest.fixture(scope="module")
def state():
    return WorkerState(Path(tempfile.mkdtemp(prefix="kernelpro-test-")))


def candidates(subgraph):
    return {
        "source": SourceCandidate("triton", HONEST, "entry"),
        "spec": codegen_space().initial(subgraph)[0],
    }


@pytest.mark.parametrize("kind", ["source", "spec"])
def test_ok_candidate_gets_roofline_findings_and_reasons_for_skipped_tools(
    kind, pointwise_subgraph, state
):
    job = Job.from_subgraph(pointwise_subgraph, candidates(pointwise_subgraph)[kind], feedback=PLAN)
    result = evaluate_job(job, state)
    assert result.status is EvalStatus.OK, result.message
    assert [f.tool for f in result.findings] == ["roofline", "roofline"]
    assert result.findings[0].value == "under-utilised"
    assert result.details["tools_run"] == []
    skipped = dict(result.details["tools_skipped"])
    assert set(skipped) == {"ptxas", "sass"}
    assert all(INTERPRETER in why for why in skipped.values()), skipped
    assert "feedback_error" not in result.details


def test_a_failing_feedback_is_recorded_and_the_candidate_stays_ok(
    monkeypatch, pointwise_subgraph, state, capsys
):
    def broken(*args, **kwargs):
        raise RuntimeError("cuobjdump vanished\nand more")

    monkeypatch.setattr(feedback, "candidate_feedback", broken)
    job = Job.from_subgraph(pointwise_subgraph, SourceCandidate("triton", HONEST, "entry"))
    result = evaluate_job(dataclasses.replace(job, feedback=PLAN), state)
    assert result.status is EvalStatus.OK and result.median_ms > 0
    assert result.findings == ()
    assert result.details["feedback_error"] == "RuntimeError: cuobjdump vanished"
    assert "FEEDBACK FAILED" in capsys.readouterr().out


def test_baselines_and_plans_without_feedback_get_no_findings(softmax_subgraph, state):
    eager = Job.from_subgraph(softmax_subgraph, BaselineCandidate("eager"), feedback=PLAN)
    result = evaluate_job(eager, state)
    assert result.ok and result.findings == () and "tools_run" not in result.details
    plain = evaluate_job(
        Job.from_subgraph(softmax_subgraph, candidates(softmax_subgraph)["spec"]), state
    )
    assert plain.ok and plain.findings == () and "tools_run" not in plain.details


def test_findings_cross_the_pool(pointwise_subgraph):
    from kernelpro_backend.runtime import WorkerPool

    job = Job.from_subgraph(pointwise_subgraph, SourceCandidate("triton", HONEST, "entry"))
    with WorkerPool(workers=1, timeout_s=60) as pool:
        result = pool.evaluate(dataclasses.replace(job, feedback=PLAN))
    assert result.ok, result.message
    assert result.findings[0].tool == "roofline"
    assert dict(result.details["tools_skipped"]).keys() == {"ptxas", "sass"}
