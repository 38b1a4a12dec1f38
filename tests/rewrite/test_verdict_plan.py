"""Per-kernel in-context verdicts (rewrite/verdict_plan.py) and their compiles and cache record
(rewrite/judged.py's Judging), with a fake timer: each variant of the graph "takes" the time a
table gives its set of kernels, and compiles "take" fake seconds."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from kernelpro_backend.rewrite import judged
from kernelpro_backend.rewrite.judged import JudgedGraph, Judging
from kernelpro_backend.rewrite.providers import IsolatedMs
from kernelpro_backend.rewrite.verdict_plan import (
    BUDGET_FLOOR_S,
    BUDGET_SHARE,
    ISOLATED_MARGIN,
    MAX_LEAVE_OUT,
    VerdictPlan,
    conservative,
    leave_out_order,
    verdict_budget_s,
)
from kernelpro_backend.rewrite.verdict_timing import ROUNDS, decide

NONE: frozenset[str] = frozenset()


def graph_ms(base: float, deltas: dict[str, float]):
    """The graph's time with a set of kernels: `base` plus each installed kernel's delta."""
    return lambda kept: base + sum(deltas[k] for k in kept)


def run_plan(plan: VerdictPlan, ms) -> Any:
    while (sets := plan.next_trial()) is not None:
        candidate, reference = sets
        plan.tell(decide([ms(candidate)] * ROUNDS, [ms(reference)] * ROUNDS))
    return plan.outcome()


def test_all_kept_when_the_graph_is_faster_and_no_kernel_loses():
    ms = graph_ms(2.0, {"a": -0.3, "b": -0.2})
    outcome = run_plan(VerdictPlan(["a", "b"], {}, 1e9, leave_outs=["a", "b"]), ms)
    assert outcome.kept == {"a", "b"}
    # each leave-one-out variant was timed against the graph with all of them
    assert [(t.candidate, t.reference) for t in outcome.trials[1:]] == [
        ({"b"}, {"a", "b"}),
        ({"a"}, {"a", "b"}),
    ]
    assert outcome.record()["dropped"] == {}


def test_all_dropped_when_no_timed_set_beats_the_fallback():
    ms = graph_ms(2.0, {"a": 0.3, "b": 0.2})
    outcome = run_plan(VerdictPlan(["a", "b"], {}, 1e9, leave_outs=["a", "b"]), ms)
    assert outcome.kept == NONE
    record = outcome.record()
    assert not record["keep"] and record["kept"] == []
    # b's in-context effect: the graph with a and b against the graph with a alone
    assert record["effects"]["b"] == pytest.approx(2.5 / 2.3 - 1, abs=1e-4)
    assert "+8.7% graph time with it" in record["dropped"]["b"]


def test_leave_one_out_keeps_the_kernels_that_win_when_all_of_them_lose():
    """The graph with both is slower (b costs more than a saves); leaving b out beats the
    fallback: a stays, b goes, and the log line says why."""
    ms = graph_ms(2.0, {"a": -0.2, "b": 0.5})
    isolated = {"a": IsolatedMs(0.5, 0.8), "b": IsolatedMs(0.4, 0.6)}
    outcome = run_plan(VerdictPlan(["a", "b"], isolated, 1e9, leave_outs=["a", "b"]), ms)
    assert outcome.first is not None and not outcome.first.keep
    assert outcome.kept == {"a"}
    line = outcome.describe("forward")
    assert "keeps 1 of its 2 kernel(s) ['a']" in line
    assert "b (alone 0.4 vs 0.6 ms (+33.3%), in context +27.8% graph time with it)" in line
    assert "the kept set 1.8000 ms against 2.0000" in line and "pairs)" in line
    assert "the verdict cost" in line


def test_leave_one_out_finds_a_loser_when_all_of_them_win():
    ms = graph_ms(2.0, {"a": -0.5, "b": 0.1})
    outcome = run_plan(VerdictPlan(["a", "b"], {}, 1e9, leave_outs=["b", "a"]), ms)
    assert outcome.first is not None and outcome.first.keep
    assert outcome.kept == {"a"}
    assert outcome.effect("b") == pytest.approx(1.6 / 1.5 - 1)


def test_the_best_timed_set_wins_and_never_an_untimed_one():
    """Leaving b out and leaving c out each beat the fallback; the set without both was never
    timed, so the better of the two timed sets is kept."""
    ms = graph_ms(2.0, {"a": -0.3, "b": 0.25, "c": 0.2})
    plan = VerdictPlan(["a", "b", "c"], {}, 1e9, leave_outs=["b", "c", "a"])
    outcome = run_plan(plan, ms)
    assert outcome.kept == {"a", "c"}  # 1.9 ms, against {"a", "b"}'s 1.95


def test_leave_out_order_doubtful_first_then_largest_isolated_gain():
    isolated = {
        "small": IsolatedMs(0.95, 1.0),  # 5%: under the margin, doubtful
        "big": IsolatedMs(1.0, 3.0),  # saves 2 ms
        "mid": IsolatedMs(0.5, 1.5),  # saves 1 ms
        "tie": IsolatedMs(2.0, 2.0, tentative=True),
    }
    order = leave_out_order(["mid", "big", "small", "tie", "unknown"], isolated)
    assert order == ["tie", "small", "unknown", "big", "mid"]


def test_budget_is_a_share_of_the_search_budget_with_a_floor():
    assert verdict_budget_s(120.0, 4) == pytest.approx(BUDGET_SHARE * 480)
    assert verdict_budget_s(10.0, 1) == BUDGET_FLOOR_S


def test_a_spent_budget_stops_the_leave_one_out_trials():
    ms = graph_ms(2.0, {"a": -0.2, "b": 0.5})
    plan = VerdictPlan(["a", "b"], {}, budget_s=1.0, spent_s=1.0, leave_outs=["b", "a"])
    outcome = run_plan(plan, ms)
    assert len(outcome.trials) == 1 and outcome.over_budget
    assert outcome.kept == NONE  # decided on what was timed: the graph with both lost
    assert "in context not timed alone" in outcome.why_dropped("a")


def test_unjudged_keeps_only_clear_isolated_wins():
    isolated = {
        "clear": IsolatedMs(0.75, 1.0),
        "thin": IsolatedMs(1.0 - ISOLATED_MARGIN / 2, 1.0),
        "tie": IsolatedMs(1.0, 1.0, tentative=True),
    }
    kernels = ["clear", "thin", "tie", "unknown"]
    assert conservative(kernels, isolated) == {"clear"}
    outcome = VerdictPlan(kernels, isolated, 1.0).unjudged()
    assert outcome.kept == {"clear"} and outcome.over_budget and outcome.first is None
    assert "kept unjudged (over budget)" in outcome.why_dropped("tie")
    assert "(a near tie)" in outcome.why_dropped("tie")


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class Store:
    def __init__(self) -> None:
        self.records: dict[str, dict[str, Any]] = {}

    def judged(self, key):
        return self.records.get(key)

    def set_judged(self, key, record):
        self.records[key] = {**record, "time": "now"}


class Clock:
    def __init__(self) -> None:
        self.last = 0.0

    def start(self):
        return None

    def stop(self, token):
        return self.last

    def read(self, mark):
        return mark

    def wait(self, mark):
        return mark


class Compiles:
    """The backend's callbacks: each compile takes `seconds` of fake time and gives a graph
    whose calls "take" ms(its kernels) on the clock."""

    def __init__(self, ms, clock: Clock, fake: FakeTime, seconds: float = 1.0) -> None:
        self.ms, self.clock, self.fake, self.seconds = ms, clock, fake, seconds
        self.made: list[frozenset[str]] = []

    def graph(self, kept: frozenset[str]):
        self.fake.now += self.seconds
        self.made.append(kept)

        def run(args):
            self.clock.last = self.ms(kept)
            return kept

        return run

    def variant(self, kept: frozenset[str]):
        return self.graph(frozenset(kept))


KERNELS = ["a", "b", "c"]
EVERY = frozenset(KERNELS)


def _judging(store, clock, budget_s, isolated=None) -> Judging:
    return Judging("key", KERNELS, store, clock, "forward", isolated=isolated, budget_s=budget_s)


def _settle(graph, limit: int = 1000) -> int:
    calls = 0
    while not graph.settled and calls < limit:
        graph([])
        calls += 1
    return calls


def test_the_kept_set_is_cached_and_a_later_compile_installs_exactly_it(monkeypatch, caplog):
    fake = FakeTime()
    monkeypatch.setattr(judged, "time", fake)
    ms = graph_ms(2.0, {"a": -0.2, "b": -0.1, "c": 0.6})
    store, clock = Store(), Clock()
    compiles = Compiles(ms, clock, fake)
    isolated = {"a": IsolatedMs(0.5, 1.0), "b": IsolatedMs(0.6, 1.0), "c": IsolatedMs(0.4, 1.0)}
    with caplog.at_level(logging.INFO, logger="kernelpro"):
        graph = _judging(store, clock, 100.0, isolated).compile(
            lambda: compiles.graph(EVERY), compiles.variant
        )
        assert isinstance(graph, JudgedGraph)
        # all, none, and a leave-one-out variant per kernel (three, within MAX_LEAVE_OUT)
        assert compiles.made == [EVERY, NONE, *(EVERY - {k} for k in ("c", "a", "b"))]
        _settle(graph)
    assert graph([]) == {"a", "b"}
    [record] = store.records.values()
    assert record["kept"] == ["a", "b"] and record["keep"] and not record["over_budget"]
    assert record["cost_s"] >= 4.0  # four compiles of a second each, and the timed calls
    [line] = [r.message for r in caplog.records if "in context, the forward graph" in r.message]
    assert "keeps 2 of its 3 kernel(s) ['a', 'b']; drops c (alone 0.4 vs 1 ms" in line

    compiles.made.clear()
    again = _judging(store, clock, 100.0, isolated).compile(
        lambda: compiles.graph(EVERY), compiles.variant
    )
    assert compiles.made == [frozenset({"a", "b"})]  # that variant alone, untimed
    assert not isinstance(again, JudgedGraph) and again([]) == {"a", "b"}


def test_a_record_from_before_per_kernel_verdicts_reads_as_all_or_none():
    store = Store()
    store.records["key"] = {"keep": False, "with_ms": 2.0, "without_ms": 1.0}
    assert _judging(store, Clock(), 100.0).known_kept() == NONE
    store.records["key"] = {"keep": True}
    assert _judging(store, Clock(), 100.0).known_kept() == EVERY


def test_over_budget_decides_on_isolated_figures_and_says_so(monkeypatch, caplog):
    fake = FakeTime()
    monkeypatch.setattr(judged, "time", fake)
    store, clock = Store(), Clock()
    compiles = Compiles(graph_ms(2.0, {"a": 0.0, "b": 0.0, "c": 0.0}), clock, fake, seconds=30)
    isolated = {"a": IsolatedMs(0.5, 1.0), "b": IsolatedMs(1.0, 1.0, tentative=True)}
    with caplog.at_level(logging.INFO, logger="kernelpro"):
        compiled = _judging(store, clock, 20.0, isolated).compile(
            lambda: compiles.graph(EVERY), compiles.variant
        )
    # the graph with all kernels took 30 s, over the 20 s budget: no trial; only "a" is a clear
    # isolated win, so the variant with it alone is compiled and runs untimed
    assert not isinstance(compiled, JudgedGraph)
    assert compiles.made == [EVERY, frozenset({"a"})] and compiled([]) == {"a"}
    [record] = store.records.values()
    assert record["over_budget"] and record["kept"] == ["a"] and record["budget_s"] == 20.0
    assert any("is over budget" in r.message for r in caplog.records)
    assert any("(over budget: conservative)" in r.message for r in caplog.records)
    # a compile with a larger budget judges again; one with the same budget does not
    assert _judging(store, clock, 20.0).known_kept() == {"a"}
    assert _judging(store, clock, 200.0).known_kept() is None


def test_the_budget_bounds_the_leave_one_out_compiles(monkeypatch):
    fake = FakeTime()
    monkeypatch.setattr(judged, "time", fake)
    store, clock = Store(), Clock()
    compiles = Compiles(graph_ms(2.0, {"a": 0.3, "b": 0.3, "c": -0.1}), clock, fake)
    graph = _judging(store, clock, 2.5).compile(lambda: compiles.graph(EVERY), compiles.variant)
    # none (1 s), one leave-one-out (2 s spent); a second would pass 2.5 s
    assert len(compiles.made) == 3 and isinstance(graph, JudgedGraph)
    _settle(graph)
    [record] = store.records.values()
    assert record["over_budget"] and len(record["dropped"]) == 3  # nothing timed won
    assert MAX_LEAVE_OUT >= 2  # the budget, not the cap, stopped it


def test_a_fallback_graph_that_does_not_compile_leaves_only_clear_isolated_wins(monkeypatch):
    """Nothing to time against: the conservative decision, not recorded (a later compile tries
    again), and tentative kernels never run unjudged."""
    fake = FakeTime()
    monkeypatch.setattr(judged, "time", fake)
    store, clock = Store(), Clock()
    compiles = Compiles(graph_ms(2.0, {"a": 0.0, "b": 0.0, "c": 0.0}), clock, fake)

    def variant(kept):
        if not kept:
            raise RuntimeError("output strides differ")
        return compiles.graph(frozenset(kept))

    isolated = {"a": IsolatedMs(0.5, 1.0), "b": IsolatedMs(1.0, 1.0, tentative=True)}
    compiled = _judging(store, clock, 100.0, isolated).compile(
        lambda: compiles.graph(EVERY), variant
    )
    assert not isinstance(compiled, JudgedGraph) and compiled([]) == {"a"}
    assert store.records == {}


# -- objective "energy": kept unless slower beyond the energy rule's time tolerance ----------
TOL = 0.02  # search/winner.py's ENERGY_TIME_TOLERANCE (tuner/verdicts.py passes it)


def run_energy_plan(plan: VerdictPlan, ms) -> Any:
    """As run_plan, each trial under the margin the plan gives it."""
    while (sets := plan.next_trial()) is not None:
        candidate, reference = sets
        margin = plan.margin(candidate, reference)
        plan.tell(decide([ms(candidate)] * ROUNDS, [ms(reference)] * ROUNDS, margin))
    return plan.outcome()


@pytest.mark.parametrize("delta, kept", [(0.03, True), (0.05, False)])
def test_under_energy_a_kernel_stays_unless_the_graph_is_slower_beyond_the_tolerance(delta, kept):
    """A kernel chosen for its joules makes the 2 ms graph 1.5% (kept) or 2.5% (dropped)
    slower; under "time" it goes either way (not faster)."""
    isolated = {"e": IsolatedMs(1.003, 1.0)}
    ms = graph_ms(2.0, {"e": delta})
    energy = run_energy_plan(VerdictPlan(["e"], isolated, 1e9, tolerance=TOL), ms)
    assert energy.kept == ({"e"} if kept else NONE)
    assert run_plan(VerdictPlan(["e"], isolated, 1e9), ms).kept == NONE
    assert energy.first is not None and energy.first.margin == -TOL
    assert energy.record()["margin"] == -TOL  # the rule it was judged by, in the cache


@pytest.mark.parametrize("delta, kept", [(0.02, {"a", "e"}), (0.06, {"a"})])
def test_under_energy_a_kernel_costing_more_than_the_tolerance_goes_where_another_hides_it(
    delta, kept
):
    """A time winner saves 15% of the graph, so the graph with both is faster; leaving the
    energy kernel out makes it faster by 1.1% (it stays) or 3.4% (beyond the tolerance: it
    goes)."""
    isolated = {"a": IsolatedMs(0.5, 0.8), "e": IsolatedMs(1.003, 1.0)}
    ms = graph_ms(2.0, {"a": -0.3, "e": delta})
    plan = VerdictPlan(["a", "e"], isolated, 1e9, leave_outs=["e", "a"], tolerance=TOL)
    outcome = run_energy_plan(plan, ms)
    assert outcome.kept == kept
    assert [t.verdict.margin for t in outcome.trials] == [-TOL, TOL, TOL]


def test_under_energy_a_tentative_kernel_keeps_the_time_rule():
    """A near tie has no joule figure behind it: trials that add or take it out need the
    graph faster beyond MARGIN; the firm kernels' trials take the tolerance."""
    from kernelpro_backend.rewrite.verdict_timing import MARGIN

    isolated = {"t": IsolatedMs(1.0, 1.0, tentative=True), "e": IsolatedMs(1.003, 1.0)}
    plan = VerdictPlan(["t", "e"], isolated, 1e9, tolerance=TOL)
    assert plan.margin(frozenset({"t", "e"}), NONE) == MARGIN
    assert plan.margin(frozenset({"e"}), NONE) == -TOL
    assert plan.margin(frozenset({"t"}), frozenset({"t", "e"})) == TOL
    assert plan.margin(frozenset({"e"}), frozenset({"t", "e"})) == MARGIN
    assert VerdictPlan(["e"], isolated, 1e9).margin(frozenset({"e"}), NONE) == MARGIN
