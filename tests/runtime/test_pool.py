"""Isolation on CPU: a candidate that exits, segfaults or hangs kills only its worker; the pool
replaces it and the next job evaluates normally."""

import pytest
from gaming_corpus import CRASHES, HONEST

from kernelpro_backend.runtime import (
    BaselineCandidate,
    EvalStatus,
    Job,
    SourceCandidate,
    WorkerPool,
)


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(workers=2, timeout_s=12) as p:
        yield p


def honest(subgraph):
    return Job.from_subgraph(subgraph, SourceCandidate("triton", HONEST, "entry"))


@pytest.mark.parametrize("name", sorted(CRASHES))
def test_crash_or_hang_kills_only_its_worker(name, pool, pointwise_subgraph):
    text, status = CRASHES[name]
    bad = Job.from_subgraph(pointwise_subgraph, SourceCandidate("triton", text, "entry"))
    replaced = pool.replaced
    bad_result, good_result = pool.evaluate_many([bad, honest(pointwise_subgraph)])
    assert bad_result.status.value == status, bad_result.message
    assert "worker" in bad_result.message
    assert pool.replaced == replaced + 1
    assert good_result.status is EvalStatus.OK, good_result.message
    # the replacement serves the next job too
    assert pool.evaluate(honest(pointwise_subgraph)).ok


def test_segfault_reports_the_signal(pool, pointwise_subgraph):
    text, _ = CRASHES["segfault"]
    job = Job.from_subgraph(pointwise_subgraph, SourceCandidate("triton", text, "entry"))
    result = pool.evaluate(job)
    assert "SIGSEGV" in result.message and result.details["exitcode"] == -11


def test_results_come_back_in_job_order(pool, softmax_subgraph, pointwise_subgraph):
    jobs = [
        Job.from_subgraph(softmax_subgraph, BaselineCandidate("eager")),
        Job.from_subgraph(pointwise_subgraph, SourceCandidate("triton", "def entry(:", "entry")),
        honest(pointwise_subgraph),
    ]
    statuses = [r.status for r in pool.evaluate_many(jobs)]
    assert statuses == [EvalStatus.OK, EvalStatus.COMPILE_ERROR, EvalStatus.OK]


def test_closed_pool_refuses_work(pointwise_subgraph):
    pool = WorkerPool(workers=1)
    pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.evaluate(honest(pointwise_subgraph))


@pytest.mark.slow
def test_inductor_baseline_is_validated_and_timed(softmax_subgraph):
    # Its own pool with the searcher's 120 s limit (tuner.searcher): a cold Inductor
    # compile in a fresh worker took over the module pool's 12 s hang limit on a fresh CI machine.
    job = Job.from_subgraph(softmax_subgraph, BaselineCandidate("inductor"))
    with WorkerPool(workers=2, timeout_s=120) as pool:
        eager, inductor = pool.evaluate_many(job.baselines())
    assert eager.ok and inductor.ok, (eager.message, inductor.message)
    assert inductor.details["candidate"]["name"] == "inductor"


def test_jobs_stay_in_flight_and_report_their_phases(pool, pointwise_subgraph):
    """submit/collect: several jobs in flight on two workers that take the GPU (here: the
    pool's lock) in turn; every result says where its time went, the queue included."""
    tickets = [pool.submit(honest(pointwise_subgraph)) for _ in range(3)]
    assert pool.in_flight == 3
    done: dict = {}
    while len(done) < 3:
        done.update(pool.collect())
    assert sorted(done) == tickets and pool.in_flight == 0
    for result in done.values():
        assert result.ok, result.message
        phases = result.details["phase_s"]
        assert {"queue", "load", "compile", "gpu_wait", "time", "validate"} <= set(phases)
        assert all(v >= 0 for v in phases.values())
