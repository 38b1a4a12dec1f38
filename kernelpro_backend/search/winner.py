"""Choosing the outcome of a search: the fastest proved candidate, unless the fallback ties it.

Owns: `choose_winner` — baselines (eager, Inductor) are candidates too; a kernel wins only if it
is faster than the fastest baseline beyond the measured spread of both, so the result is never
slower than the fallback by construction. With objective "energy" (`energy_pick`): among the
proved kernels (each charged what replacing the fallback costs) and the fallback within
ENERGY_TIME_TOLERANCE of the time rule's pick (a kernel, or the fallback where none replaces
it), the one with the fewest joules per call, when it saves more than ENERGY_NOISE of the
pick's; `Choice.why` says what was weighed and how many entries were within the tolerance.
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
# 6.3% (H100, 2026-12-06, docs/gpu_runs/2026-12-06-energy/energy-h100-run1.json): above that.
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
    its own `surcharge(candidate, ms)` (a host path slower than a Triton launch's). Objective
    "energy": `energy_pick` against that winner (module docstring)."""
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
    if first is not None:
        time_pick = Choice(first.candidate, first.node_id, first.result, best)
    elif base is not None:
        time_pick = Choice(base[0], None, base[1], best)
    else:  # nothing worked, not even a baseline: the fallback still runs the subgraph
        name = "inductor" if "inductor" in baselines or not baselines else next(iter(baselines))
        return Choice(name, None, baselines.get(name), best)
    if objective == "time":
        return time_pick
    assert time_pick.result is not None

    def charged_ms(entry: Entry) -> float:
        """A kernel's time with what replacing the fallback costs it (nothing for a baseline)."""
        ms = entry[2].median_ms or 0.0
        if entry[1] is None:
            return ms
        return ms + min_gain_ms + (surcharge(entry[0], ms) if surcharge else 0.0)

    # Every proved kernel competes, also where none replaces the fallback on time (the fallback
    # is then the time rule's pick and the reference of the tolerance): a kernel as fast as
    # Inductor's within the tolerance, its replacement cost charged, may use fewer joules.
    eligible: list[Entry] = [(m.candidate, m.node_id, m.result) for m in ok]
    if base is not None:
        eligible.append((base[0], None, base[1]))
    fastest: Entry = (time_pick.winner, time_pick.node_id, time_pick.result)
    pick, why = energy_pick(fastest, eligible, charged=charged_ms)
    return Choice(pick[0], pick[1], pick[2], best, why)


def energy_pick(
    fastest: Entry,
    eligible: Sequence[Entry],
    tolerance: float = ENERGY_TIME_TOLERANCE,
    noise: float = ENERGY_NOISE,
    charged: Callable[[Entry], float] | None = None,
) -> tuple[Entry, dict[str, Any]]:
    """The entry objective "energy" chooses, and why. Only entries with a joule figure and at
    most `tolerance` slower than `fastest` (each entry's time as `charged` counts it: its
    median by default) compete; one wins only if it uses more than `noise` fewer joules than
    `fastest`; among those within `noise` of the fewest joules, the faster wins (then the
    lower node id, a kernel before a baseline). Otherwise `fastest` stays: also when it has no
    joule figure (no saving can be shown against it). `why` counts the entries within the
    tolerance ("within", `fastest` included) and their joules' range ("j_range"): whether the
    rule had any choice at all."""
    cost = charged or (lambda e: e[2].median_ms or 0.0)
    f_j = fastest[2].energy_j
    limit_ms = cost(fastest) * (1 + tolerance)
    near_ms = [e for e in eligible if e[2].energy_j is not None and cost(e) <= limit_ms]
    if fastest[2].energy_j is not None and not any(e[:2] == fastest[:2] for e in near_ms):
        near_ms.append(fastest)
    joules = [e[2].energy_j or 0.0 for e in near_ms]
    why: dict[str, Any] = {
        "tolerance": tolerance, "noise": noise, "fastest": _figures(fastest),
        "within": len(near_ms), "j_range": [min(joules), max(joules)] if joules else None,
    }  # fmt: skip
    savers = [e for e in near_ms if f_j is not None and (e[2].energy_j or 0.0) < f_j * (1 - noise)]
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
