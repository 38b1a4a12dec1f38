"""optimize() end to end over synthetic landscapes: optimum within budget, budgets and early
stopping, baselines winning ties, the energy objective, the search log."""

from __future__ import annotations

import io
import json

from synthetic import (
    BOWL_BEST_MS,
    BOWL_OPTIMUM,
    BOWL_SEED,
    BOWL_VALUES,
    FakeSubgraph,
    SyntheticMeasurer,
    SyntheticSpace,
    bowl,
    bowl_search_parts,
)

from kernelpro_backend.search import Budget, optimize

NO_EARLY_STOP = {"sol_stop_fraction": None, "plateau_trials": None}


def test_finds_the_optimum_within_budget_and_beats_inductor():
    space, measurer = bowl_search_parts()
    out = optimize(
        FakeSubgraph(),
        space=space,
        measurer=measurer,
        budget=Budget(max_trials=60, max_seconds=1e9, **NO_EARLY_STOP),
        progress=False,
    )
    assert not out.uses_fallback
    assert dict(out.winner.knobs) == BOWL_OPTIMUM
    assert out.result.median_ms == BOWL_BEST_MS
    assert out.trials <= 60 and len(measurer.measured) == out.trials
    # inductor is 2.0 ms in the synthetic measurer
    assert abs(out.speedup_vs_inductor - 2.0 / BOWL_BEST_MS) < 1e-12
    # the search never measured a candidate twice
    assert len({tuple(sorted(k.items())) for k in measurer.measured}) == out.trials


def test_max_trials_is_respected_with_batches():
    space, measurer = bowl_search_parts()
    out = optimize(
        FakeSubgraph(),
        space=space,
        measurer=measurer,
        budget=Budget(max_trials=12, max_seconds=1e9, **NO_EARLY_STOP),
        batch_size=5,
        progress=False,
    )
    assert out.trials == 12 == len(measurer.measured)
    assert out.stop_reason == "max_trials" and out.trials_saved == 0


def test_wall_time_budget_is_respected():
    clock = [0.0]
    space, measurer = bowl_search_parts(clock=clock, seconds_per_trial=1.0)
    out = optimize(
        FakeSubgraph(),
        space=space,
        measurer=measurer,
        budget=Budget(max_trials=50, max_seconds=4.5, **NO_EARLY_STOP),
        clock=lambda: clock[0],
        progress=False,
    )
    assert out.stop_reason == "max_seconds"
    assert out.trials == 4  # a 5th, started at 4 s, would finish at 5 s, past the 4.5 s
    assert out.trials_saved == 0  # time ran out: nothing was saved


def test_speed_of_light_stops_early_and_reports_trials_saved():
    # SOL 0.85 ms: only candidates at <= 0.944 ms reach 90% of SOL (the optimum is 0.9 ms)
    space, measurer = bowl_search_parts(sol_ms=0.85)
    budget = Budget(max_trials=60, max_seconds=1e9, sol_stop_fraction=0.9, plateau_trials=None)
    out = optimize(FakeSubgraph(), space=space, measurer=measurer, budget=budget, progress=False)
    assert out.stop_reason == "sol"
    assert out.result.sol_fraction >= 0.9
    assert out.trials < 60 and out.trials == len(measurer.measured)
    assert out.trials_saved == 60 - out.trials > 0


def test_speed_of_light_does_not_stop_a_search_still_behind_its_baseline():
    # at 95% of SOL but slower than the fastest baseline (a library GEMM nearer still), only
    # searching on can win; once ahead, the rule stops it
    from kernelpro_backend.search.budget import SOL, BudgetTracker

    tracker = BudgetTracker(Budget(max_trials=60, max_seconds=1e9, plateau_trials=None))
    tracker.record(0.0, 0.95, ahead=False)
    assert tracker.stop_reason() is None
    tracker.record(0.1, 0.95, ahead=True)
    assert tracker.stop_reason() == SOL


def test_speed_of_light_goes_on_while_a_baseline_is_still_faster():
    # every candidate is within 90% of SOL (0.85 ms) but the fallback's 0.6 ms beats them all:
    # the search does not stop at SOL and, nothing winning, keeps the baseline
    space, measurer = bowl_search_parts(sol_ms=0.85, baselines={"inductor": 0.6})
    budget = Budget(max_trials=20, max_seconds=1e9, sol_stop_fraction=0.9, plateau_trials=None)
    out = optimize(FakeSubgraph(), space=space, measurer=measurer, budget=budget, progress=False)
    assert out.stop_reason != "sol" and out.trials > 1
    assert out.winner == "inductor"


def test_plateau_stops_a_flat_landscape():
    space = SyntheticSpace(BOWL_VALUES, [BOWL_SEED])
    measurer = SyntheticMeasurer(lambda k: 1.0)
    budget = Budget(max_trials=40, max_seconds=1e9, sol_stop_fraction=None, plateau_trials=5)
    out = optimize(FakeSubgraph(), space=space, measurer=measurer, budget=budget, progress=False)
    # the first success sets the best; 5 further trials without a 1% gain stop the search
    assert out.stop_reason == "plateau"
    assert out.trials == 6
    assert out.trials_saved == 34


def test_baseline_wins_when_no_candidate_beats_it_beyond_the_spread():
    # best candidate 1.99 ms vs inductor 2.0 ms, spreads 0.005: intervals overlap -> a tie
    space = SyntheticSpace(BOWL_VALUES, [BOWL_SEED])
    measurer = SyntheticMeasurer(lambda k: 1.99 + 0.01 * k["num_warps"] / 16, spread=0.005)
    out = optimize(
        FakeSubgraph(),
        space=space,
        measurer=measurer,
        budget=Budget(max_trials=10, max_seconds=1e9, **NO_EARLY_STOP),
        progress=False,
    )
    assert out.uses_fallback and out.winner == "inductor"
    assert out.result is out.baselines["inductor"]
    assert out.best_result is not None and out.best_result.median_ms < 2.0  # faster, but a tie


def test_fastest_baseline_is_the_winner_when_eager_is_faster():
    space = SyntheticSpace(BOWL_VALUES, [BOWL_SEED])
    measurer = SyntheticMeasurer(bowl, baselines={"eager": 0.5, "inductor": 2.0})
    out = optimize(
        FakeSubgraph(),
        space=space,
        measurer=measurer,
        budget=Budget(max_trials=8, max_seconds=1e9, **NO_EARLY_STOP),
        progress=False,
    )
    assert out.winner == "eager"


def test_energy_objective_prefers_the_lower_energy_tie():
    # two candidates 0.900 and 0.905 ms (tied within the 0.005 spread); the slower one uses less
    def landscape(k):
        return {1: 0.9, 2: 0.905}.get(k["num_warps"], 1.5)

    def energy(k):
        return {1: 2.0, 2: 1.0}.get(k["num_warps"], 3.0)

    results = {}
    for objective in ("time", "energy"):
        space = SyntheticSpace({"num_warps": (1, 2, 4)}, [{"num_warps": 4}])
        measurer = SyntheticMeasurer(landscape, energy=energy)
        out = optimize(
            FakeSubgraph(),
            space=space,
            measurer=measurer,
            budget=Budget(max_trials=10, max_seconds=1e9, **NO_EARLY_STOP),
            objective=objective,
            progress=False,
        )
        assert out.stop_reason == "exhausted"  # all 3 candidates tried
        results[objective] = dict(out.winner.knobs)["num_warps"]
    assert results == {"time": 1, "energy": 2}


def test_search_log_and_progress_line(tmp_path):
    space, measurer = bowl_search_parts()
    log_path = tmp_path / "logs" / "search.jsonl"
    stream = io.StringIO()
    out = optimize(
        FakeSubgraph(),
        space=space,
        measurer=measurer,
        budget=Budget(max_trials=7, max_seconds=1e9, **NO_EARLY_STOP),
        log_path=str(log_path),
        stream=stream,
    )
    events = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert [e["event"] for e in events] == ["start"] + ["trial"] * 7 + ["end"]
    start, trials, end = events[0], events[1:-1], events[-1]
    assert start["baselines"] == {"eager": 3.0, "inductor": 2.0} and start["kind"] == "reduction"
    assert trials[0]["parent"] is None and trials[0]["move"] == "initial"
    assert all(t["parent"] is not None for t in trials[1:])
    first = trials[0]
    assert first["median_ms"] == bowl(BOWL_SEED)
    assert abs(first["speedup"] - 2.0 / bowl(BOWL_SEED)) < 1e-12
    assert end["trials"] == 7 and end["reason"] == "max_trials" and end["trials_saved_by_sol"] == 0
    assert end["winner"] == (out.winner_id if not out.uses_fallback else out.winner)
    text = stream.getvalue()
    assert "\r" in text and "trial 7/7" in text and text.endswith("\n")


def test_energy_search_logs_joules_the_choice_and_the_power_cap(tmp_path):
    def landscape(k):
        return {1: 0.9, 2: 0.91}.get(k["num_warps"], 1.5)

    def energy(k):
        return {1: 2.0, 2: 1.0}.get(k["num_warps"], 3.0)

    log_path, stream = tmp_path / "search.jsonl", io.StringIO()
    cap = {"enforced_w": 450.0, "default_w": 700.0, "capped": True, "note": "power-capped"}
    out = optimize(
        FakeSubgraph(),
        space=SyntheticSpace({"num_warps": (1, 2, 4)}, [{"num_warps": 4}]),
        measurer=SyntheticMeasurer(landscape, energy=energy),
        budget=Budget(max_trials=10, max_seconds=1e9, **NO_EARLY_STOP),
        objective="energy",
        log_path=str(log_path),
        stream=stream,
        header={"power_cap": cap},
    )
    assert dict(out.winner.knobs) == {"num_warps": 2}  # 1.1% slower, half the joules
    events = [json.loads(line) for line in log_path.read_text().splitlines()]
    start, trials, end = events[0], events[1:-1], events[-1]
    assert start["objective"] == "energy" and start["power_cap"] == cap
    assert sorted(t["energy_j"] for t in trials) == [1.0, 2.0, 3.0]
    choice = end["energy_choice"]
    assert choice["winner"] == {"node": out.winner_id, "ms": 0.91, "j": 1.0}
    assert choice["fastest"]["ms"] == 0.9 and choice["fastest"]["j"] == 2.0
    assert "energy: 1000 mJ/call, 50.0% fewer joules than the fastest at +1.1% time" in (
        stream.getvalue()
    )


def test_time_search_logs_no_energy_choice(tmp_path):
    space, measurer = bowl_search_parts()
    log_path = tmp_path / "search.jsonl"
    optimize(
        FakeSubgraph(),
        space=space,
        measurer=measurer,
        budget=Budget(max_trials=5, max_seconds=1e9, **NO_EARLY_STOP),
        log_path=str(log_path),
        progress=False,
    )
    events = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert "energy_choice" not in events[-1] and "power_cap" not in events[0]
    assert not any("energy_j" in e for e in events[1:-1])


def test_one_search_gives_each_objectives_pick_from_the_same_trials():
    def landscape(k):
        return {1: 0.9, 2: 0.91}.get(k["num_warps"], 1.5)

    def energy(k):
        return {1: 2.0, 2: 1.0}.get(k["num_warps"], 3.0)

    measurer = SyntheticMeasurer(landscape, energy=energy)
    out = optimize(
        FakeSubgraph(),
        space=SyntheticSpace({"num_warps": (1, 2, 4)}, [{"num_warps": 4}]),
        measurer=measurer,
        budget=Budget(max_trials=10, max_seconds=1e9, **NO_EARLY_STOP),
        objective="energy",
        progress=False,
    )
    assert len(measurer.measured) == 3  # one search: each candidate measured once
    by_time, by_energy = out.under("time"), out.under("energy")
    assert dict(by_time.winner.knobs) == {"num_warps": 1} and by_time.result.median_ms == 0.9
    assert dict(by_energy.winner.knobs) == {"num_warps": 2} and by_energy.result.energy_j == 1.0
    assert by_energy.winner == out.winner and by_time.winner_id != out.winner_id
    assert out.choices["time"].why == {} and out.choices["energy"].why["winner"]["j"] == 1.0
    assert by_time.baselines is out.baselines and by_time.trials == out.trials


def test_an_energy_search_without_a_proposer_proposes_the_energy_moves():
    # optimize()'s own RuleProposer follows the objective: the smoke probe's searcher and any
    # caller that passes no proposer got the time rules only under objective "energy"
    trees: list = []
    optimize(
        FakeSubgraph(),
        space=SyntheticSpace({"num_warps": (2, 4, 8)}, [{"num_warps": 4}]),
        measurer=SyntheticMeasurer(lambda k: 1.0, energy=lambda k: 1.0),
        budget=Budget(max_trials=2, max_seconds=1e9, **NO_EARLY_STOP),
        objective="energy",
        progress=False,
        tree_out=trees,
    )
    child = trees[0].nodes[2]
    assert (child.reason, child.move) == ("objective:energy", "num_warps:down")
