"""The warm-up's in-context rule (incontext.decide) with made-up step times, and the verdicts'
file (cache/context.py): which kernels are recorded as losing inside their model."""

from __future__ import annotations

import pytest

from kernelpro_backend.cache.context import ContextVerdicts
from kernelpro_backend.incontext import decide


def timer(times: dict[frozenset[str], float]):  # type: ignore[no-untyped-def]
    asked: list[frozenset[str]] = []

    def time_without(excluded: frozenset[str]) -> float:
        asked.append(excluded)
        return times[excluded]

    return time_without, asked


def test_kernels_that_speed_the_step_up_are_kept_after_two_timings():
    time_without, asked = timer({frozenset(): 10.0, frozenset({"a", "b"}): 10.5})
    losers, lines = decide(time_without, ["a", "b"], first=10.0)
    assert losers == [] and asked == [frozenset({"a", "b"}), frozenset()]
    assert "10.000 ms a step, the fallback alone 10.500 ms" in lines[0]


def test_the_kernel_whose_absence_speeds_the_step_up_is_the_one_recorded():
    times = {
        frozenset(): 10.6,
        frozenset({"a", "b"}): 10.2,
        frozenset({"a"}): 10.7,  # a helps
        frozenset({"b"}): 9.9,  # b hurts
    }
    time_without, _ = timer(times)
    losers, lines = decide(time_without, ["a", "b"], first=10.6)
    assert losers == ["b"]
    assert any("without b" in line for line in lines)


def test_when_no_single_kernel_is_to_blame_they_all_go():
    times = {frozenset(): 10.6, frozenset({"a", "b"}): 10.0, frozenset({"a"}): 10.55,
             frozenset({"b"}): 10.55}  # fmt: skip
    losers, _ = decide(timer(times)[0], ["a", "b"], first=10.6)
    assert losers == ["a", "b"]


def test_a_loser_whose_removal_still_leaves_the_step_slow_takes_the_rest_along():
    times = {frozenset(): 11.0, frozenset({"a", "b"}): 10.0, frozenset({"a"}): 11.1,
             frozenset({"b"}): 10.6}  # fmt: skip
    losers, _ = decide(timer(times)[0], ["a", "b"], first=11.0)
    # without b: 10.6 ms, still over the fallback's 10.0 beyond the margin: both go
    assert losers == ["a", "b"]


@pytest.mark.parametrize(("first", "again"), [(10.0, 10.3), (10.3, 10.0)])
def test_a_difference_inside_the_timings_own_spread_keeps_the_kernels(first, again):
    """Two timings of the same step 3% apart: a 2% loss is noise, not a verdict."""
    times = {frozenset(): again, frozenset({"a"}): 9.8}
    losers, lines = decide(timer(times)[0], ["a"], first=first)
    assert losers == [] and "margin 3.0%" in lines[0]


def test_verdicts_are_written_at_once_and_read_back(tmp_path, caplog):
    path = tmp_path / "context.json"
    ContextVerdicts(path).reject("d" * 64, pattern="norm", why="slower")
    again = ContextVerdicts(path)
    assert again.rejected("d" * 64)["pattern"] == "norm" and len(again) == 1
    assert again.rejected("e" * 64) is None
    path.write_text("{not json")
    assert ContextVerdicts(path).rejected("d" * 64) is None  # unreadable: warned, ignored
    assert "ignoring unreadable" in caplog.text
