"""What a measured time beyond the speed-of-light bound means (runtime/sol_check.py): a
candidate is SUSPICIOUS, a baseline (PyTorch's own code) shows the bound is wrong and stays OK."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kernelpro_backend.profilers.speed_of_light import SOL_MARGIN, beyond_light
from kernelpro_backend.runtime.sol_check import beyond_light_result
from kernelpro_backend.runtime.timing import Timing

JOB: Any = SimpleNamespace(name="pointwise-5fb09b9425ac")


def _timing(ms: float, spread: float = 0.015) -> Timing:
    return Timing(median_ms=ms, spread_ms=spread, times_ms=(ms,), method="events")


def test_a_time_is_beyond_light_only_under_the_margin_with_its_spread():
    assert beyond_light(1.018, 0.015, 1.336) is not None  # BERT's eager under the old bound
    assert beyond_light(1.018, 0.015, 1.002) is None  # under the bound fixed since
    assert beyond_light(0.89, 0.0, 1.0) is not None and beyond_light(0.9, 0.0, 1.0) is None
    assert beyond_light(0.85, 0.06, 1.0) is None  # its spread reaches the margin
    assert beyond_light(0.1, 0.0, None) is None  # no bound, no verdict
    assert SOL_MARGIN == 0.9


def test_a_candidate_beyond_light_is_suspicious():
    details: dict = {}
    result = beyond_light_result(JOB, False, _timing(1.018), 1.336, details)
    assert result is not None and result.status.value == "suspicious"
    assert "skipping work" in result.message and result.sol_ms == 1.336
    assert details["measured_median_ms"] == 1.018


def test_a_baseline_beyond_light_stays_ok_and_says_the_bound_is_wrong(capsys):
    """Flagged, eager would drop out of the search's baselines and a slower kernel could win."""
    details: dict = {}
    assert beyond_light_result(JOB, True, _timing(1.018), 1.336, details) is None
    assert "faster than the speed-of-light bound 1.336 ms" in details["beyond_bound"]
    assert "BOUND TOO HIGH for pointwise-5fb09b9425ac" in capsys.readouterr().out


def test_nothing_is_said_within_the_bound():
    details: dict = {}
    assert beyond_light_result(JOB, False, _timing(1.4), 1.336, details) is None
    assert details == {}
