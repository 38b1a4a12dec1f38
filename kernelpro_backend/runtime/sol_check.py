"""What a measured time beyond the speed of light means, for a candidate and for a baseline.

Owns: `beyond_light_result`: a candidate faster than the bound (profilers/speed_of_light.py,
SOL_MARGIN) is SUSPICIOUS, a measurement bug or a kernel skipping work; a baseline (eager's or
Inductor's code, the reference itself) that beats the bound shows the bound is wrong for that
subgraph: said and noted, never a rejection.
Must not: compute bounds (profilers/speed_of_light.py) or time anything (timing.py).

Why a baseline is never rejected: flagged, it drops out of the search's baselines
(search/winner.fastest_baseline takes only OK ones), and a kernel slower than it may "win". On
an H100 BERT's MLM-head subgraph had its bound counting a returned view as written (4.0 GB
where 3.0 move), and a 1.018 ms run read as beyond its 1.336 ms bound: by elimination a
baseline's (kernelpro's own kernels write that view as a copy, 4.0 GB); not logged which.
"""

from __future__ import annotations

from typing import Any

from ..profilers.speed_of_light import beyond_light
from .job import Job
from .result import EvalResult, EvalStatus
from .timing import Timing


def beyond_light_result(
    job: Job, baseline: bool, timing: Timing, sol_ms: float | None, details: dict[str, Any]
) -> EvalResult | None:
    """SUSPICIOUS for a candidate beyond the bound; None otherwise (a baseline beyond it is
    logged, and `details` says so)."""
    beyond = beyond_light(timing.median_ms, timing.spread_ms, sol_ms)
    if beyond is None:
        return None
    details.update(measured_median_ms=timing.median_ms, measured_spread_ms=timing.spread_ms)
    if baseline:
        print(f"kernelpro: BOUND TOO HIGH for {job.name}: the baseline {beyond}", flush=True)
        details["beyond_bound"] = beyond
        return None
    message = f"{beyond}: a measurement bug or a kernel skipping work"
    print(f"kernelpro: SUSPICIOUS {job.name}: {message}", flush=True)
    return EvalResult(EvalStatus.SUSPICIOUS, sol_ms=sol_ms, message=message, details=details)
