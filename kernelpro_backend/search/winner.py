"""Choosing the outcome of a search: the fastest proved candidate, unless the fallback ties it.

Owns: `choose_winner` — baselines (eager, Inductor) are candidates too; a kernel wins only if it
is faster than the fastest baseline beyond the measured spread of both, so the result is never
slower than the fallback by construction. With objective "energy" (`energy_pick`): among the
kernels within ENERGY_TIME_TOLERANCE of the fastest one that replaces the fallback (and the
fallback itself, if it is that close), the one with the fewest joules per call, when it saves
more than ENERGY_NOISE of the fastest one's; `Choice.why` says what was weighed.
Must not: measure or search.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from ..runtime.result import EvalResult
from .rewards import faster_beyond_spread

OBJECTIVES = ("time", "energy")
# objective="energy": a candidate may be this fraction slower than the fastest proved kernel
# (the one objective="time" picks) and still be chosen for using fewer joules per call.
ENERGY_TIME_TOLERANCE = 0.02
# Joules per call closer than this fraction are a tie, and a tie goes to the faster: a saving
# must exceed it to trade any time. Measured: the NVML counter read step to step over >= 0.2 s
# (profilers/energy.py) gave one kernel's joules per call twice 3.0-3.4% apart, and Inductor's
# 6.3% (H100, 2026-12-06, docs/gpu_runs/2026-12-06-energy/energy-h100.json): above that.
ENERGY_NOISE = 0.07


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
    # objective "energy": the pick against the fastest ({"rule", "winner": {"ms", "j"},
    # "fastest": {...}, "tolerance", "noise"}); empty under objective "time"
    why: dict[str, Any] = dataclasses.field(default_factory=dict)


Entry = tuple[Hashable | str, int | None, EvalResult]  # (candidate or baseline name, node, result)


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
    if objective == "energy":
        eligible: list[Entry] = [(m.candidate, m.node_id, m.result) for m in ok if wins(m)]
        if base is not None:
            eligible.append((base[0], None, base[1]))
        pick, why = energy_pick((first.candidate, first.node_id, first.result), eligible)
        return Choice(pick[0], pick[1], pick[2], best, why)
    return Choice(first.candidate, first.node_id, first.result, best)


def energy_pick(
    fastest: Entry,
    eligible: Sequence[Entry],
    tolerance: float = ENERGY_TIME_TOLERANCE,
    noise: float = ENERGY_NOISE,
) -> tuple[Entry, dict[str, Any]]:
    """The entry objective "energy" chooses, and why. Only entries with a joule figure and at
    most `tolerance` slower than `fastest` compete; one wins only if it uses more than `noise`
    fewer joules than `fastest`; among those within `noise` of the fewest joules, the faster
    wins (then the lower node id, a kernel before a baseline). Otherwise `fastest` stays: also
    when it has no joule figure (no saving can be shown against it)."""
    f_ms, f_j = fastest[2].median_ms or 0.0, fastest[2].energy_j
    why: dict[str, Any] = {"tolerance": tolerance, "noise": noise, "fastest": _figures(fastest)}
    limit_ms = f_ms * (1 + tolerance)
    savers = [
        e for e in eligible
        if e[2].energy_j is not None and f_j is not None and (e[2].median_ms or 0.0) <= limit_ms
        and e[2].energy_j < f_j * (1 - noise)
    ]  # fmt: skip
    if not savers:
        rule = "no joule figure for the fastest" if f_j is None else "fastest: none saves more"
        return fastest, {**why, "rule": rule, "winner": _figures(fastest)}
    fewest = min(e[2].energy_j or 0.0 for e in savers)
    near = [e for e in savers if (e[2].energy_j or 0.0) <= fewest * (1 + noise)]
    pick = min(near, key=lambda e: (e[2].median_ms or 0.0, e[1] if e[1] is not None else 1 << 62))
    return pick, {**why, "rule": "fewest joules within the time tolerance",
                  "winner": _figures(pick)}  # fmt: skip


def _figures(entry: Entry) -> dict[str, Any]:
    r = entry[2]
    node = entry[1] if entry[1] is not None else str(entry[0])
    return {"node": node, "ms": r.median_ms, "j": r.energy_j}
