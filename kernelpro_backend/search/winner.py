"""Choosing the outcome of a search: the fastest proved candidate, unless the fallback ties it.

Owns: `choose_winner` — baselines (eager, Inductor) are candidates too; a kernel wins only if it
is faster than the fastest baseline beyond the measured spread of both, so the result is never
slower than the fallback by construction. With objective "energy", among the kernels that tie
the fastest one (and still beat the fallback) the one with the lowest energy_j wins.
Must not: measure or search.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping, Sequence

from ..runtime.result import EvalResult
from .rewards import faster_beyond_spread

OBJECTIVES = ("time", "energy")


@dataclasses.dataclass(frozen=True)
class Measured:
    node_id: int
    candidate: Hashable
    result: EvalResult


@dataclasses.dataclass(frozen=True)
class Choice:
    winner: Hashable | str  # a candidate, or the name of a baseline ("eager", "inductor")
    node_id: int | None  # the tree node of a winning candidate; None for a baseline
    result: EvalResult | None  # None only when nothing at all was measured successfully
    best: Measured | None  # the fastest working candidate, even if a baseline won


def fastest_baseline(baselines: Mapping[str, EvalResult]) -> tuple[str, EvalResult] | None:
    ok = [(r.median_ms, name, r) for name, r in baselines.items() if r.ok and r.median_ms]
    if not ok:
        return None
    _, name, result = min(ok, key=lambda t: (t[0], t[1]))
    return name, result


def _proved(result: EvalResult) -> bool:
    """OK and proved: a candidate abandoned after its warm-up runs was never validated."""
    return result.ok and not result.details.get("abandoned")


def replaces(result: EvalResult, base: EvalResult, need_ms: float) -> bool:
    """Whether `result` takes the place of the baseline `base`: faster beyond both spreads and
    by at least `need_ms`."""
    gain = (base.median_ms or 0.0) - (result.median_ms or 0.0)
    return faster_beyond_spread(result, base) and gain >= need_ms


def choose_winner(
    measured: Sequence[Measured],
    baselines: Mapping[str, EvalResult],
    objective: str = "time",
    min_gain_ms: float = 0.0,
    surcharge: Callable[[Hashable, float], float] | None = None,
) -> Choice:
    """The winner: the fastest kernel that beats the fastest baseline beyond the spread AND by
    at least `min_gain_ms` per call (what replacing a subgraph costs beyond its GPU time: the
    opaque op's host-side launch and the fusion across its boundary that Inductor loses) plus
    its own `surcharge(candidate, ms)` (a host path slower than a Triton launch's)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; use one of {OBJECTIVES}")
    ok = sorted(
        (m for m in measured if _proved(m.result) and m.result.median_ms is not None),
        key=lambda m: (m.result.median_ms, m.node_id),
    )
    best = ok[0] if ok else None
    base = fastest_baseline(baselines)

    def wins(m: Measured) -> bool:
        if base is None:
            return True
        r = m.result
        need = min_gain_ms + (surcharge(m.candidate, r.median_ms or 0.0) if surcharge else 0.0)
        return replaces(r, base[1], need)

    first = next((m for m in ok if wins(m)), None)
    if first is None:
        if base is not None:
            return Choice(base[0], None, base[1], best)
        # nothing worked, not even a baseline: the fallback still runs the subgraph
        name = "inductor" if "inductor" in baselines or not baselines else next(iter(baselines))
        return Choice(name, None, baselines.get(name), best)
    pick = first
    if objective == "energy":
        contenders = [m for m in ok if not faster_beyond_spread(first.result, m.result) and wins(m)]
        pick = min(
            contenders,
            key=lambda m: (
                m.result.energy_j if m.result.energy_j is not None else float("inf"),
                m.result.median_ms,
                m.node_id,
            ),
        )
    return Choice(pick.candidate, pick.node_id, pick.result, best)
