"""A warm-up's summary: its rows, the seconds of each phase, its search plan's counts and what
the deadline left unsearched, the in-context check's lines; as a table and as JSON.

Owns: `WarmupReport`, `Phases` (the clock of each phase), `PHASES` (their names, in order).
Must not: search, time kernels or decide anything (offline.py, planned.py, incontext.py do).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from typing import Any

from .rows import WarmupRow

# The phases of a warm-up, in the order they run, with the summary's words for them.
PHASES = (
    ("collect", "collecting subgraphs"),
    ("search", "searching"),
    ("cutlass", "building CUTLASS libraries"),
    ("compile", "compiling"),
    ("check", "in-context check"),
)
NOT_REACHED_SHOWN = 10  # the table names this many of the subgraphs the deadline left


class Phases(dict[str, float]):
    """Seconds per phase (PHASES' names), summed over the times each ran."""

    @contextlib.contextmanager
    def timing(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self[name] = self.get(name, 0.0) + time.perf_counter() - t0

    def line(self, total: float) -> str:
        parts = [f"{label} {self[name]:.1f} s" for name, label in PHASES if name in self]
        return f"phases: {', '.join(parts)}; {total:.0f} s in all"


@dataclasses.dataclass
class WarmupReport:
    rows: list[WarmupRow]
    seconds: float
    context: list[str] = dataclasses.field(default_factory=list)  # the in-context check
    phases: dict[str, float] = dataclasses.field(default_factory=dict)
    plan: dict[str, Any] = dataclasses.field(default_factory=dict)  # planned.plan_summary

    def table(self) -> str:
        header = (
            f"{'graph':<10}{'pattern':<28}{'key':<14}{'n':>4} {'result':<10}{'seconds':>8}  note"
        )
        lines = [header, "-" * len(header)]
        for r in self.rows:
            lines.append(
                f"{r.graph:<10}{r.pattern[:27]:<28}{r.key:<14}{r.count:>4} {r.result:<10}"
                f"{r.seconds:>8.1f}  {r.note}".rstrip()
            )
        total = sum(r.count for r in self.rows)
        kernels = sum(r.count for r in self.rows if r.result == "kernel")
        lines.append(
            f"{total} subgraphs, {kernels} with a kernel, "
            f"{total - kernels} on the fallback; {self.seconds:.0f} s"
        )
        if self.phases:
            lines.append(Phases(self.phases).line(self.seconds))
        lines.extend(self.plan_lines())
        lines.extend(self.context)
        lines.extend(self.coverage())
        return "\n".join(lines)

    def plan_lines(self) -> list[str]:
        """The search plan's counts, and the subgraphs the deadline left (not silently)."""
        p = self.plan
        if not p:
            return []
        lines = [
            f"search plan: {p['distinct']} distinct subgraphs of {p['occurrences']}; "
            f"{p['planned']} planned by estimated gain ({p['basis']}): {p['searched']} searched, "
            f"{p['found']} found a kernel, {p['skipped']} skipped, {p['not_reached']} not "
            f"reached by the deadline; {p['cached']} cached, {p['below_floor']} below the floor "
            f"of {p['floor_us']:.1f} us a call, {p['searched_before']} searched before"
        ]
        left = p.get("not_reached_items", [])
        if left:
            shown = ", ".join(
                f"{i['pattern']} {i['key']} x{i['count']} ({i['gain_ms']:.3f} ms a step)"
                for i in left[:NOT_REACHED_SHOWN]
            )
            more = (
                f" and {len(left) - NOT_REACHED_SHOWN} more"
                if len(left) > NOT_REACHED_SHOWN
                else ""
            )
            lines.append(f"not reached (a later warm-up resumes with them): {shown}{more}")
        return lines

    def coverage(self) -> list[str]:
        """Per example shape (several warmed): how many of its subgraphs got a kernel."""
        shapes = list(dict.fromkeys(r.shape for r in self.rows if r.shape))
        if len(shapes) < 2:
            return []
        out = ["covered shapes (subgraphs with a kernel / looked up):"]
        for shape in shapes:
            rows = [r for r in self.rows if r.shape == shape and r.result != "symbolic"]
            got = sum(r.result == "kernel" for r in rows)
            out.append(f"  {shape}: {got}/{len(rows)}")
        return out

    def to_dict(self) -> dict[str, Any]:
        """The summary as JSON (`kernelpro warmup --json`; keys stable, new ones may come)."""
        return {
            "seconds": round(self.seconds, 3),
            "phases": {
                name: round(self.phases[name], 3) for name, _ in PHASES if name in self.phases
            },
            "plan": self.plan,
            "rows": [dataclasses.asdict(r) for r in self.rows],
            "context": self.context,
        }
