"""The "behind" rule: a search whose best candidate is far slower than the fallback (under
0.8x) and gaining too slowly to reach it in the trials left stops early, like the plateau rule
(whose window it uses); a search still closing the gap fast enough, or near parity, goes on."""

from __future__ import annotations

import math

import pytest
from synthetic import BOWL_SEED, BOWL_VALUES, FakeSubgraph, SyntheticMeasurer, SyntheticSpace

from kernelpro_backend.search import Budget, optimize
from kernelpro_backend.search.budget import BEHIND, PLATEAU, BudgetTracker


def _tracker(history: list[float], **budget) -> BudgetTracker:
    tracker = BudgetTracker(Budget(max_seconds=1e9, sol_stop_fraction=None, **budget))
    for best in history:
        tracker.record(best, None)
    return tracker


def test_far_behind_and_gaining_slowly_stops():
    # 0.47x of the fallback, +2% per window of 8: 55 trials left would gain ~0.15 of 0.76
    history = [math.log(0.46)] * 5 + [math.log(0.47)] * 4
    tracker = _tracker(history, max_trials=64, plateau_trials=8, plateau_eps=0.01)
    assert tracker.stop_reason() == BEHIND
    assert tracker.trials_saved(BEHIND) == 55


def test_closing_the_gap_fast_enough_goes_on():
    # 0.5x -> 0.7x in one window of 8 (+0.34): 56 trials at that pace would pass parity
    history = [math.log(0.5 + 0.025 * i) for i in range(9)]
    tracker = _tracker(history, max_trials=64, plateau_trials=8)
    assert tracker.stop_reason() is None


def test_near_the_fallback_is_left_to_the_plateau_rule():
    history = [math.log(0.9 + 0.002 * i) for i in range(9)]  # 0.9x, +1.8% per window
    tracker = _tracker(history, max_trials=64, plateau_trials=8)
    assert tracker.stop_reason() is None
    flat = _tracker([math.log(0.9)] * 9, max_trials=64, plateau_trials=8)
    assert flat.stop_reason() == PLATEAU


def test_off_with_the_plateau_rule_or_by_none():
    history = [math.log(0.46)] * 4 + [math.log(0.47)] * 5
    assert _tracker(history, max_trials=64, plateau_trials=None).stop_reason() is None
    off = _tracker(history, max_trials=64, plateau_trials=8, behind_gap=None)
    assert off.stop_reason() is None
    with pytest.raises(ValueError, match="behind_gap"):
        Budget(behind_gap=0.0)


def test_a_search_slower_than_the_fallback_everywhere_stops_behind():
    """Every candidate near 2x slower than Inductor (2.0 ms), improving by 0.5% a trial."""
    space = SyntheticSpace(BOWL_VALUES, [BOWL_SEED])
    calls: list[int] = []

    def slow(knobs):
        calls.append(1)
        return 4.0 * 0.995 ** len(calls)

    measurer = SyntheticMeasurer(slow)
    budget = Budget(max_trials=64, max_seconds=1e9, sol_stop_fraction=None, plateau_trials=8)
    out = optimize(FakeSubgraph(), space=space, measurer=measurer, budget=budget, progress=False)
    assert out.stop_reason == BEHIND
    assert out.trials < 64 and out.trials_saved == 64 - out.trials
