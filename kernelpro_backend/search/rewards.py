"""Rewards of measured candidates and the tie rule that keeps the fallback when in doubt.

Owns: `RewardModel` (reward = log(t_reference / t), a calibrated penalty per failure status) and
`faster_beyond_spread`, the one comparison that decides whether one time beats another.
Must not: measure or choose candidates.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from ..runtime.result import EvalResult, EvalStatus

# Rewards are in log units of speed relative to the reference (the fastest baseline): +0.69 is
# 2x faster, -0.69 2x slower. A working candidate more than e (2.7x) slower than the reference
# is useless however slow it is, so its reward is clipped at OK_FLOOR. Failures rank below every
# working candidate; a compile error (cheap, often fixed by a neighbouring knob value, e.g. fewer
# stages for shared memory) ranks above a wrong, crashing, hanging or suspicious kernel, whose
# neighbours tend to share the bug.
OK_FLOOR = -1.0
DEFAULT_PENALTIES: Mapping[EvalStatus, float] = {
    EvalStatus.COMPILE_ERROR: -1.5,
    EvalStatus.WRONG: -2.0,
    EvalStatus.CRASHED: -2.0,
    EvalStatus.TIMED_OUT: -2.0,
    EvalStatus.SUSPICIOUS: -2.0,
}


@dataclasses.dataclass(frozen=True)
class RewardModel:
    reference_ms: float
    penalties: Mapping[EvalStatus, float] = dataclasses.field(
        default_factory=lambda: dict(DEFAULT_PENALTIES)
    )
    ok_floor: float = OK_FLOOR

    def __post_init__(self) -> None:
        if not (self.reference_ms > 0 and math.isfinite(self.reference_ms)):
            raise ValueError(
                f"reference time must be a positive finite number of ms, got {self.reference_ms!r}; "
                "pass the median of a working baseline or candidate"
            )
        worst_ok = self.ok_floor
        for status, penalty in self.penalties.items():
            if penalty >= worst_ok:
                raise ValueError(
                    f"penalty for {status.value} ({penalty}) must be below the floor of working "
                    f"candidates ({worst_ok}) so that failures never outrank them"
                )

    def reward(self, result: EvalResult) -> float:
        if result.ok and result.median_ms is not None and result.median_ms > 0:
            return max(self.ok_floor, math.log(self.reference_ms / result.median_ms))
        if result.ok:  # OK without a usable time is a measurer bug: treat it as suspicious
            return self.penalties.get(EvalStatus.SUSPICIOUS, min(self.penalties.values()))
        return self.penalties[result.status]


def spread_of(result: EvalResult) -> float:
    return result.spread_ms or 0.0


def faster_beyond_spread(a: EvalResult, b: EvalResult) -> bool:
    """True when `a` is faster than `b` by more than the measured noise of both: the intervals
    median +- spread do not overlap. Anything less is a tie, and ties go to whoever holds the
    place already (the fallback, or the parent in the tree)."""
    if not (a.ok and b.ok) or a.median_ms is None or b.median_ms is None:
        return False
    return a.median_ms + spread_of(a) < b.median_ms - spread_of(b)


def tied(a: EvalResult, b: EvalResult) -> bool:
    return not faster_beyond_spread(a, b) and not faster_beyond_spread(b, a)
