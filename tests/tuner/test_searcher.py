"""The searcher and its measurer: `options.proposer` is honoured, and "llm" without its endpoint settings
fails once, at set-up, saying what to set; the measurer asks the workers for the two-stage
feedback (`options.search_tools`, ncu only below the subgraph's best time) and classifies a
result itself only when the worker's feedback failed; the searcher keeps its last outcome, from
which each objective's rule gives its artifact."""

from __future__ import annotations

import contextlib
import json

import pytest

from kernelpro_backend.options import Options
from kernelpro_backend.search import LLMProposer, LLMSetupError, RuleProposer
from kernelpro_backend.tuner.searcher import make_proposer

ENDPOINT = {"OPENAI_BASE_URL": "http://127.0.0.1:1/v1", "OPENAI_API_KEY": "k"}


def test_rules_by_default():
    assert isinstance(make_proposer(Options.resolve(environ={}), environ={}), RuleProposer)


def test_llm_without_endpoint_settings_says_what_to_set():
    options = Options.resolve(options={"proposer": "llm"}, environ={})
    with pytest.raises(LLMSetupError, match="needs OPENAI_BASE_URL and OPENAI_API_KEY set"):
        make_proposer(options, environ={})


def test_llm_with_endpoint_settings_uses_the_model_option_and_falls_back_to_rules():
    options = Options.resolve(options={"proposer": "llm", "llm_model": "local-coder"}, environ={})
    proposer = make_proposer(options, environ={**ENDPOINT, "OPENAI_MODEL": "ignored"})
    assert isinstance(proposer, LLMProposer) and proposer.client.model == "local-coder"
    assert isinstance(proposer.fallback, RuleProposer)
    from_env = make_proposer(Options.resolve(options={"proposer": "llm"}, environ={}),
                             environ={**ENDPOINT, "OPENAI_MODEL": "env-model"})  # fmt: skip
    assert from_env.client.model == "env-model"


class _Stop(Exception):
    pass


def test_the_searcher_hands_its_proposer_to_optimize(monkeypatch, tmp_path):
    import torch
    from helpers import subgraphs_of

    import kernelpro_backend.tuner.searcher as searcher_module
    from kernelpro_backend.tuner.searcher import SubgraphSearcher

    for name, value in ENDPOINT.items():
        monkeypatch.setenv(name, value)
    options = Options.resolve(
        options={"proposer": "llm", "cache_dir": str(tmp_path), "progress": False}, environ={}
    )
    searcher = SubgraphSearcher(options)
    seen = {}

    def fake_optimize(subgraph, **kwargs):
        seen.update(kwargs)
        raise _Stop

    monkeypatch.setattr(searcher_module, "optimize", fake_optimize)
    monkeypatch.setattr(searcher_module, "lease_pool", _fake_lease)
    (sg,) = subgraphs_of(lambda x: torch.softmax(x, -1), torch.randn(8, 40), train=False)
    with pytest.raises(_Stop):
        searcher(sg)
    assert seen["proposer"] is searcher.proposer and isinstance(searcher.proposer, LLMProposer)


@contextlib.contextmanager
def _fake_lease(workers, timeout_s, idle_s, **settings):
    yield _FakePool([])


class _FakePool:
    """The pool's interface (evaluate_many, submit/collect), answering from a list."""

    start_s = 0.0

    def __init__(self, results):
        self.results, self.jobs, self.submitted = list(results), [], {}

    def evaluate_many(self, jobs):
        self.jobs.append(list(jobs))
        return [self.results.pop(0) for _ in jobs]

    def submit(self, job):
        ticket = len(self.submitted)
        self.submitted[ticket] = job
        return ticket

    def collect(self):
        done = {t: self.results.pop(0) for t in sorted(self.submitted)}
        self.jobs.append([self.submitted[t] for t in sorted(self.submitted)])
        self.submitted = {}
        return done


def test_the_measurer_asks_workers_for_feedback_and_ncu_only_below_the_best(tmp_path):
    import torch
    from helpers import subgraphs_of

    from kernelpro_backend.profilers import Finding, Severity
    from kernelpro_backend.profilers.ceilings import Ceilings
    from kernelpro_backend.profilers.speed_of_light import SpeedOfLight
    from kernelpro_backend.runtime import EvalResult, EvalStatus, SourceCandidate
    from kernelpro_backend.runtime.feedback import subgraph_roofs
    from kernelpro_backend.tuner.measurer import PoolMeasurer

    (sg,) = subgraphs_of(lambda x: torch.softmax(x, -1), torch.randn(8, 40), train=False)
    options = Options.resolve(
        options={"search_tools": "ptxas,ncu", "cache_dir": str(tmp_path)},
        environ={"KERNELPRO_NCU_RUN_TIMEOUT_S": "33", "KERNELPRO_TIMING_HEAT_S": "0.05"},
    )
    ceilings = Ceilings("H100", 3.0e12, 60e12, 400e12, 800e12, 50 * 2**20)
    roof = Finding("roofline", "bottleneck", "memory-bound", None, Severity.LOW, "from the worker")
    ptxas = Finding("ptxas", "registers_per_thread", 32, None, Severity.INFO, "32 registers")

    def ok(ms, findings=(roof,)):
        return EvalResult(EvalStatus.OK, median_ms=ms, findings=findings)

    results = [ok(2.0), ok(1.0), EvalResult(EvalStatus.WRONG), ok(1.5, (ptxas,))]
    pool = _FakePool(results)
    measurer = PoolMeasurer(options, pool, sg, ceilings, capacity=2)
    candidates = [SourceCandidate("triton", f"# {i}\ndef entry(x): ...", "entry") for i in range(4)]

    first = measurer.measure(sg, candidates[:2])
    plan = pool.jobs[0][0].feedback
    assert plan.tools == ("ptxas", "ncu") and plan.ncu_below_ms is None  # nothing to beat yet
    assert plan.ncu_run_timeout_s == 33.0  # the option reaches the worker's ncu run
    job = pool.jobs[0][0]  # and the timing options the worker's time_kernel
    assert (job.timing_settle, job.timing_heat_s) == (True, 0.05)
    work = SpeedOfLight.work(sg)
    assert plan.roofs == subgraph_roofs(work, ceilings, sg.precision)
    assert [r.findings for r in first] == [(roof,), (roof,)]  # the worker's roofline, not twice

    second = measurer.measure(sg, candidates[2:])
    assert pool.jobs[1][0].feedback.ncu_below_ms == 1.0  # the best so far
    assert second[0].findings == ()  # failed: no roofline
    # OK without a roofline finding (the worker's feedback failed): the parent classifies it
    assert [f.tool for f in second[1].findings] == ["roofline", "roofline", "ptxas"]
    assert measurer.best_ms == 1.0

    measurer.pool = _FakePool([ok(3.0), ok(2.5)])
    measurer.baselines(sg)
    assert all(job.feedback is None for job in measurer.pool.jobs[0])


def test_ncu_in_search_tools_gives_workers_more_time():
    from kernelpro_backend.tuner.searcher import SubgraphSearcher

    for tools, timeout in (("ptxas,sass", 120.0), ("ptxas,ncu", 120.0 + 240.0)):
        options = Options.resolve(options={"search_tools": tools}, environ={})
        assert SubgraphSearcher(options).job_timeout_s == timeout
    options = Options.resolve(options={"job_timeout_s": 30, "ncu_timeout_s": 5}, environ={})
    assert (
        SubgraphSearcher(
            Options.resolve(
                options={"search_tools": "ncu", "job_timeout_s": 30, "ncu_timeout_s": 5}, environ={}
            )
        ).job_timeout_s
        == 35
    )


def test_only_big_memory_bound_subgraphs_get_a_bandwidth_target(tmp_path):
    import torch
    from helpers import subgraphs_of

    from kernelpro_backend.profilers.ceilings import Ceilings
    from kernelpro_backend.tuner.searcher import BANDWIDTH_TARGET, SubgraphSearcher

    searcher = SubgraphSearcher(Options(cache_dir=str(tmp_path)))
    searcher.ceilings = lambda sg: Ceilings("H100", 3.0e12, 60e12, 400e12, 800e12, 50 * 2**20)
    (big,) = subgraphs_of(lambda x: torch.softmax(x, -1), torch.randn(4096, 8192), train=False)
    (small,) = subgraphs_of(lambda x: torch.softmax(x, -1), torch.randn(8, 40), train=False)
    (gemm,) = subgraphs_of(
        lambda a, b: a @ b, torch.randn(2048, 2048), torch.randn(2048, 2048), train=False
    )
    assert searcher.bandwidth_target(big) == BANDWIDTH_TARGET  # 268 MB moved: ~89 us of DRAM
    assert searcher.bandwidth_target(small) is None  # launch latency decides
    assert searcher.bandwidth_target(gemm) is None  # compute-bound


def test_a_size_that_starts_from_its_familys_winners_searches_a_quarter_as_long():
    import dataclasses

    from graphs import tanh_subgraph

    from kernelpro_backend.tuner.searcher import HINTED_BUDGET, _options_for

    options = Options(budget_s=120.0, max_trials=64)
    plain = tanh_subgraph()
    assert _options_for(options, plain) is options
    hinted = dataclasses.replace(plain, hints=(("rowwise", (("num_warps", 4),)),))
    short = _options_for(options, hinted)
    assert short.budget_s == 120.0 * HINTED_BUDGET and short.max_trials == 16


def test_a_proof_of_a_neighbouring_sizes_winner_measures_it_alone():
    import dataclasses

    from graphs import tanh_subgraph

    from kernelpro_backend.tuner.searcher import _options_for

    hinted = dataclasses.replace(
        tanh_subgraph(), hints=(("rowwise", (("num_warps", 4),)),), hints_only=True
    )
    assert _options_for(Options(max_trials=64), hinted).max_trials == 1


def test_the_searcher_keeps_its_outcome_and_each_rules_artifact_comes_from_it(
    monkeypatch, tmp_path
):
    """One search under "energy": the artifact returned is the energy rule's pick; the time
    rule's, from the same trials, is another kernel (the fastest), with no second search."""
    import torch
    from helpers import subgraphs_of

    import kernelpro_backend.tuner.searcher as searcher_module
    from kernelpro_backend.runtime.result import EvalResult, EvalStatus
    from kernelpro_backend.search import optimize
    from kernelpro_backend.tuner.searcher import SubgraphSearcher, outcome_artifact

    class Measurer:  # by the candidate's warps: 4 the fastest, 2 1.2% slower at half the joules
        def measure(self, subgraph, candidates):
            figures = [{4: (0.5, 2.0), 2: (0.506, 1.0)}.get(dict(c.knobs).get("num_warps"),
                                                            (0.9, 3.0)) for c in candidates]  # fmt: skip
            return [EvalResult(EvalStatus.OK, median_ms=ms, spread_ms=1e-4, energy_j=j)
                    for ms, j in figures]  # fmt: skip

        def baselines(self, subgraph):
            return {"inductor": EvalResult(EvalStatus.OK, median_ms=1.0, spread_ms=1e-3)}

    searches = []

    def measured_optimize(subgraph, **kwargs):
        searches.append(kwargs["objective"])
        return optimize(subgraph, **{**kwargs, "measurer": Measurer(), "batch_size": 1})

    monkeypatch.setattr(searcher_module, "optimize", measured_optimize)
    monkeypatch.setattr(searcher_module, "lease_pool", _fake_lease)
    options = Options.resolve(
        options={"objective": "energy", "cache_dir": str(tmp_path), "progress": False,
                 "max_trials": 12, "budget_s": 3600},
        environ={},
    )  # fmt: skip
    searcher = SubgraphSearcher(options)
    (sg,) = subgraphs_of(lambda x: torch.softmax(x, -1), torch.randn(8, 40), train=False)
    monkeypatch.setattr(searcher, "plan", lambda s: type("Plan", (), {"concurrent": 1,
                                                                     "exact": True})())  # fmt: skip
    kept = searcher(sg)
    outcome = searcher.outcome
    assert searches == ["energy"] and outcome is not None
    log = str(tmp_path / "logs" / f"{sg.key.digest[:16]}.jsonl")
    by_rule = {
        rule: outcome_artifact(outcome.under(rule), sg, log, searcher.layout.cubin_root, options)
        for rule in ("time", "energy")
    }
    warps = {rule: dict(json.loads(a.spec_json)["knobs"])["num_warps"]
             for rule, a in by_rule.items()}  # fmt: skip
    assert warps == {"time": 4, "energy": 2}
    assert kept.spec_json == by_rule["energy"].spec_json and kept.kernel_ms == 0.506
    assert by_rule["time"].kernel_ms == 0.5


def test_a_planned_budget_replaces_budget_s_for_its_subgraph_only(monkeypatch, tmp_path):
    """A warm-up's plan (tuner/plan.py) gives each search its own seconds: the search's Budget
    reads them for that subgraph, budget_s for the others."""
    import torch
    from helpers import subgraphs_of

    import kernelpro_backend.tuner.searcher as searcher_module
    from kernelpro_backend.tuner.searcher import SubgraphSearcher

    options = Options.resolve(
        options={"cache_dir": str(tmp_path), "progress": False, "budget_s": 120.0}, environ={}
    )
    searcher = SubgraphSearcher(options)
    seen: list = []

    def fake_optimize(subgraph, **kwargs):
        seen.append(kwargs["budget"].max_seconds)
        raise _Stop

    monkeypatch.setattr(searcher_module, "optimize", fake_optimize)
    monkeypatch.setattr(searcher_module, "lease_pool", _fake_lease)
    (planned,) = subgraphs_of(lambda x: torch.softmax(x, -1), torch.randn(8, 40), train=False)
    (other,) = subgraphs_of(lambda x: torch.softmax(x, -1), torch.randn(8, 48), train=False)
    searcher.budgets[planned.key.digest] = 35.0
    for sg in (planned, other):
        with pytest.raises(_Stop):
            searcher(sg)
    assert seen == [35.0, 120.0]
