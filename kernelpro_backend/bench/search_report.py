"""A report over many searches: trials, tree depth, fixed costs and where a trial's time goes.

Owns: `summarize_logs(paths)` (search logs -> one row per search, from their start/trial/end
events), `report(rows)` (medians and per-phase seconds per trial, as JSON-ready data) and
`table(report)` (the short text table a GPU run prints last).
Must not: run searches or time anything (the searches wrote what it reads).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..cache.limits import MAX_LOG_BYTES, loads_bounded, read_text_bounded


def _events(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in read_text_bounded(path, MAX_LOG_BYTES, "search log").splitlines():
        try:
            out.append(loads_bounded(line, "a log line", MAX_LOG_BYTES))
        except ValueError:
            continue  # a line cut by a crash (or over a limit): the rest of the log still counts
    return out


def _searches(events: list[dict[str, Any]]) -> Iterable[list[dict[str, Any]]]:
    """A log may hold several searches of one subgraph (re-runs): split at each start."""
    current: list[dict[str, Any]] = []
    for e in events:
        if e.get("event") == "start" and current:
            yield current
            current = []
        current.append(e)
    if current:
        yield current


def _row(events: list[dict[str, Any]], source: str) -> dict[str, Any] | None:
    start = next((e for e in events if e.get("event") == "start"), None)
    end = next((e for e in events if e.get("event") == "end"), None)
    if start is None or end is None:
        return None
    trials = [e for e in events if e.get("event") == "trial"]
    baselines = start.get("baselines") or {}
    fixed = {k: float(v) for k, v in (start.get("fixed_s") or {}).items()}
    kernel_ms = [t["median_ms"] for t in trials if t.get("median_ms")]
    return {
        "log": source,
        "subgraph": start.get("subgraph"),
        "pattern": start.get("pattern"),
        "trials": int(end.get("trials", len(trials))),
        "max_depth": int((end.get("tree") or {}).get("max_depth", 0)),
        "fixed_s": round(sum(v for k, v in fixed.items() if k in _FIXED_KEYS), 3),
        "fixed_parts_s": fixed,
        "search_s": end.get("search_s"),
        "trials_per_s": end.get("trials_per_s"),
        "phase_s": end.get("phase_s") or {},
        "stop_reason": end.get("reason"),
        "why": end.get("why"),
        "inductor_ms": baselines.get("inductor"),
        "eager_ms": baselines.get("eager"),
        "best_candidate_ms": min(kernel_ms) if kernel_ms else None,
        "winner_ms": end.get("best_ms"),
        "speedup_vs_inductor": end.get("speedup_vs_inductor"),
        "kept_kernel": isinstance(end.get("winner"), int),
    }


# What a search pays before its first trial: the pool's start (once per process), the lease,
# preparing the measurer and the baselines (an Inductor compile among them).
_FIXED_KEYS = ("pool_start", "lease", "prepare", "baselines")


def summarize_logs(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    rows = []
    for path in paths:
        for events in _searches(_events(Path(path))):
            row = _row(events, str(path))
            if row is not None:
                rows.append(row)
    return rows


def _median(values: Iterable[float | None]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return statistics.median(vals) if vals else None


def report(rows: Sequence[dict[str, Any]], *, fast_ms: float = 5.0) -> dict[str, Any]:
    """Medians over the searches whose baseline runs under `fast_ms`, the fixed cost of every
    search after the first, and the mean seconds per trial by phase."""
    fast = [r for r in rows if (r["inductor_ms"] or r["eager_ms"] or 1e9) < fast_ms]
    trials = sum(r["trials"] for r in rows) or 1
    phases: dict[str, float] = {}
    for r in rows:
        for name, seconds in r["phase_s"].items():
            phases[name] = phases.get(name, 0.0) + float(seconds)
    return {
        "searches": len(rows),
        "median_trials_fast": _median(r["trials"] for r in fast),
        "fast_searches": len(fast),
        "median_max_depth": _median(r["max_depth"] for r in rows),
        "median_fixed_s_after_first": _median(r["fixed_s"] for r in rows[1:]),
        "median_trials_per_s": _median(r["trials_per_s"] for r in rows),
        "phase_s_per_trial": {k: round(v / trials, 4) for k, v in sorted(phases.items())},
        "kernels_kept": sum(r["kept_kernel"] for r in rows),
        "rows": list(rows),
    }


def table(data: dict[str, Any]) -> str:
    head = f"{'pattern':<24}{'trials':>7}{'depth':>6}{'fixed_s':>8}{'trial/s':>8}{'x ind':>7}  stop"
    lines = [head, "-" * len(head)]
    for r in data["rows"]:
        speed = r["speedup_vs_inductor"]
        lines.append(
            f"{str(r['pattern'])[:23]:<24}{r['trials']:>7}{r['max_depth']:>6}{r['fixed_s']:>8.1f}"
            f"{r['trials_per_s'] or 0:>8.2f}{speed or 0:>7.2f}  {r['stop_reason']}"
        )
    lines.append(
        f"{data['searches']} searches; median trials (baseline < 5 ms): "
        f"{data['median_trials_fast']}; median depth {data['median_max_depth']}; median fixed "
        f"s after the first {data['median_fixed_s_after_first']}; kernels kept "
        f"{data['kernels_kept']}"
    )
    per = ", ".join(f"{k} {v:.3f}" for k, v in data["phase_s_per_trial"].items())
    lines.append(f"seconds per trial by phase: {per}")
    return "\n".join(lines)
