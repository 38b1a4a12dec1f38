"""The search loop keeps candidates in flight, counts its budget from after the baselines, logs
each trial's phases and the fixed costs, explains a one-trial search, and never crowns a
candidate abandoned unproved."""

from __future__ import annotations

import json
from typing import Any

from synthetic import FakeSubgraph, SyntheticMeasurer, bowl, bowl_search_parts

from kernelpro_backend.runtime.result import EvalResult, EvalStatus
from kernelpro_backend.search import Budget, optimize
from kernelpro_backend.search.winner import Measured, choose_winner

NO_EARLY_STOP = {"sol_stop_fraction": None, "plateau_trials": None}


class AsyncFake:
    """A submit/collect measurer over the synthetic bowl that finishes one job per collect,
    oldest first, and records how many were in flight at each collect."""

    def __init__(self, clock: list[float] | None = None, seconds: float = 0.0) -> None:
        self.inner = SyntheticMeasurer(bowl)
        self.queue: list[tuple[int, Any, float | None]] = []
        self.in_flight_seen: list[int] = []
        self.limits: list[float | None] = []
        self.clock, self.seconds, self.next = clock, seconds, 0

    def baselines(self, subgraph: Any) -> dict[str, EvalResult]:
        if self.clock is not None:
            self.clock[0] += 100.0  # a slow Inductor compile: not the search's budget
        base = self.inner.baselines(subgraph)
        return {k: _with_phases(v, {"load": 99.0}) for k, v in base.items()}

    def submit(self, subgraph: Any, candidate: Any, abandon_above_ms: float | None = None) -> int:
        self.next += 1
        self.queue.append((self.next, candidate, abandon_above_ms))
        self.limits.append(abandon_above_ms)
        return self.next

    def collect(self) -> list[tuple[int, EvalResult]]:
        self.in_flight_seen.append(len(self.queue))
        ticket, candidate, _ = self.queue.pop(0)
        if self.clock is not None:
            self.clock[0] += self.seconds
        (result,) = self.inner.measure(None, [candidate])
        return [(ticket, _with_phases(result, {"compile": 0.5, "time": 0.25}))]


def _with_phases(result: EvalResult, phases: dict[str, float]) -> EvalResult:
    import dataclasses

    return dataclasses.replace(result, details={**result.details, "phase_s": phases})


def _thirty_trials_four_wide(measurer: AsyncFake) -> Any:
    space, _ = bowl_search_parts()
    return optimize(
        FakeSubgraph(),
        space=space,
        measurer=measurer,
        budget=Budget(max_trials=30, max_seconds=1e9, **NO_EARLY_STOP),
        progress=False,
        batch_size=4,
    )


def test_the_loop_keeps_n_candidates_in_flight():
    measurer = AsyncFake()
    out = _thirty_trials_four_wide(measurer)
    assert out.trials == 30
    assert max(measurer.in_flight_seen) == 4
    # after the seed (alone: its children need its result) the loop refills to 4 at once
    full = [n for n in measurer.in_flight_seen[1:-4] if n == 4]
    assert len(full) >= len(measurer.in_flight_seen[1:-4]) * 0.8
    # a candidate submitted after a proved best gets a limit of 1.5x that best
    assert measurer.limits[0] is None and all(x is not None for x in measurer.limits[-10:])


def test_the_budget_starts_after_the_baselines_and_the_log_says_where_time_went(tmp_path):
    space, _ = bowl_search_parts()
    clock = [0.0]
    measurer = AsyncFake(clock, seconds=2.0)
    log = tmp_path / "search.jsonl"
    out = optimize(
        FakeSubgraph(),
        space=space,
        measurer=measurer,
        budget=Budget(max_trials=64, max_seconds=10.0, **NO_EARLY_STOP),
        progress=False,
        batch_size=2,
        clock=lambda: clock[0],
        log_path=str(log),
        fixed_s={"pool_start": 7.5},
    )
    # 100 s of baselines did not count: 10 s at 2 s a trial leaves 5 (+ the one in flight)
    assert out.stop_reason == "max_seconds" and 5 <= out.trials <= 6
    events = [json.loads(line) for line in log.read_text().splitlines()]
    start, trials, end = events[0], events[1:-1], events[-1]
    assert start["fixed_s"]["pool_start"] == 7.5 and start["fixed_s"]["baselines"] == 100.0
    assert start["fixed_s"]["inductor_load"] == 99.0
    assert all(t["phase_s"] == {"compile": 0.5, "time": 0.25} for t in trials)
    assert [t["depth"] for t in trials][0] == 1 and max(t["depth"] for t in trials) >= 2
    assert end["phase_s"] == {"compile": 0.5 * out.trials, "time": 0.25 * out.trials}
    assert end["search_s"] >= 10.0 and end["trials_per_s"] == round(out.trials / end["search_s"], 3)


def _timed_search(tmp_path: Any, seconds: float, max_seconds: float, batch: int) -> Any:
    """A search on a fake clock, one result every `seconds`: its outcome and its end event."""
    space, _ = bowl_search_parts()
    clock = [0.0]
    log = tmp_path / "search.jsonl"
    out = optimize(
        FakeSubgraph(),
        space=space,
        measurer=AsyncFake(clock, seconds=seconds),
        budget=Budget(max_trials=64, max_seconds=max_seconds, **NO_EARLY_STOP),
        progress=False,
        batch_size=batch,
        clock=lambda: clock[0],
        log_path=str(log),
    )
    return out, json.loads(log.read_text().splitlines()[-1])


def test_no_candidate_starts_that_would_finish_past_the_wall_time(tmp_path):
    # four in flight, one result every 2 s: each candidate takes 8 s from its start. Filling
    # up to the last second would collect the last of them 8 s past the budget.
    out, end = _timed_search(tmp_path, seconds=2.0, max_seconds=30.0, batch=4)
    assert out.stop_reason == "max_seconds"
    assert 30.0 - 2.0 <= end["search_s"] <= 30.0 + 2.0
    assert out.trials == round(end["search_s"] / 2.0)


def test_a_one_trial_search_says_why(tmp_path):
    out, end = _timed_search(tmp_path, seconds=40.0, max_seconds=30.0, batch=1)
    assert out.trials == 1
    assert end["why"] == (
        "max_seconds after 1 trial: it took 0.8 s of the 30 s budget, most of it in compile (0.5 s)"
    )


def test_an_abandoned_candidate_never_wins():
    fast_unproved = EvalResult(
        EvalStatus.OK, median_ms=0.1, spread_ms=0.0, details={"abandoned": True}
    )
    proved = EvalResult(EvalStatus.OK, median_ms=0.5, spread_ms=0.0)
    baselines = {"inductor": EvalResult(EvalStatus.OK, median_ms=1.0, spread_ms=0.0)}
    choice = choose_winner(
        [Measured(1, "a", fast_unproved), Measured(2, "b", proved)], baselines, "time"
    )
    assert choice.winner == "b"


class OutOfMemoryOnce(AsyncFake):
    """The third collected candidate fails for lack of GPU memory, as a compile-ahead worker
    does when the memory plan was optimistic."""

    def collect(self) -> list[tuple[int, EvalResult]]:
        out = super().collect()
        if len(self.in_flight_seen) == 3:
            ticket, _ = out[0]
            oom = EvalResult(
                EvalStatus.CRASHED, message="load: OutOfMemoryError: CUDA out of memory."
            )
            return [(ticket, oom)]
        return out


def test_running_out_of_gpu_memory_takes_one_candidate_out_of_flight(caplog):
    measurer = OutOfMemoryOnce()
    with caplog.at_level("WARNING", logger="kernelpro"):
        out = _thirty_trials_four_wide(measurer)
    assert out.trials == 30
    assert max(measurer.in_flight_seen[:3]) == 4
    assert max(measurer.in_flight_seen[3:]) == 3  # one fewer in flight from then on
    assert "ran out of GPU memory; 3 candidate(s) in flight" in caplog.text
