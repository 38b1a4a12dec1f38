"""What kernelpro's compiles did in a bench mode, read off its compile sessions: kernels in use,
torch-level rewrites, each graph's in-context verdict; and running a step until every verdict
is made.

Owns: `kernels_used`, `rewrites_made`, `fallback_used`, `graph_verdicts`, `settle_verdicts`.
Must not: compile or time (runner.py does).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..rewrite.judged import ROUNDS, WARMUP
from ..rewrite.verdict_plan import MAX_LEAVE_OUT

# Steps that settle every in-context verdict: each graph's trials (all its kernels, then up to
# MAX_LEAVE_OUT variants that leave one out), and one more for a graph first compiled in the
# second step (a backward compiled lazily).
SETTLE_STEPS = 2 * (WARMUP + ROUNDS) * (1 + MAX_LEAVE_OUT) + 2


def kernels_used(sessions: list[Any] | None) -> str:
    """ "used/found": subgraphs that run a kernelpro kernel, of those the backend cut ("" when
    not kernelpro). A graph Inductor could not compile with our kernels is not counted, nor one
    whose in-context verdict dropped them (then ", N dropped in context" follows)."""
    if sessions is None:
        return ""
    reports = [r for s in sessions for r in s.reports]
    dropped = sum(len(r.dropped) for r in reports)
    used = sum(len(r.replaced) for r in reports) - dropped
    text = f"{used}/{sum(r.subgraphs for r in reports)}"
    return text + (f", {dropped} dropped in context" if dropped else "")


def graph_verdicts(sessions: list[Any] | None) -> list[dict[str, Any]]:
    """Each graph kernelpro compiled with kernels: its kind, in-context verdict and figures
    (rewrite/judged.py), the kernels it dropped, and each kernel's isolated figures as its
    provider gave them (rewrite/providers.IsolatedMs: ms alone, the fallback's ms alone; the
    tentative ones, near ties, listed apart)."""
    return [
        {
            "graph": r.graph,
            "kernels": len(r.replaced),
            "in_context": r.in_context,
            "verdict": r.verdict,
            "dropped": list(r.dropped),
            "isolated": {kid: ms.as_list() for kid, ms in r.isolated.items()},
            "tentative": [kid for kid, ms in r.isolated.items() if ms.tentative],
        }
        for s in sessions or ()
        for r in s.reports
        if r.replaced
    ]


def settle_verdicts(step: Callable[[], None], sessions: list[Any] | None) -> int:
    """Run `step` until every graph kernelpro compiled has its in-context verdict (its first
    calls take turns with and without its kernels, rewrite/judged.py), so timed rounds see the
    chosen variant; returns the steps run (at most SETTLE_STEPS)."""
    runs = 0
    while runs < SETTLE_STEPS and any(
        r.in_context == "judging" for s in sessions or () for r in s.reports
    ):
        step()
        runs += 1
    return runs


def rewrites_made(sessions: list[Any] | None) -> str:
    """The torch-level rewrites kernelpro's compiles made, summed over its graphs ("attention 4,
    linear_cross_entropy 1"; "none"), and those a warm-up's verdict turned off ("" when not
    kernelpro): a step's time and peak memory depend on them as much as on its kernels."""
    if sessions is None:
        return ""
    made: dict[str, int] = {}
    off: set[str] = set()
    for s in sessions:
        for name, count in s.rewrites.items():
            made[name] = made.get(name, 0) + count
        off.update(s.turned_off)  # {option: False}
    text = ", ".join(f"{name} {n}" for name, n in sorted(made.items()) if n) or "none"
    return text + (f"; off by the warm-up's verdict: {', '.join(sorted(off))}" if off else "")


def fallback_used(sessions: list[Any] | None) -> str:
    """The fallback kernelpro's graphs compiled with ("inductor" or "eager"; "" when not
    kernelpro or nothing compiled): whose own code a mode that replaced nothing ran."""
    return next((s.options.fallback for s in sessions or ()), "")
