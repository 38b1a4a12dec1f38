"""The energy probe's readers of a search log (its trials, the fastest proved ones, the energy
moves measured) and its comparison of the two rules' figures for one case (a row's verdict)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from figures import verdict


def _trials(path: str) -> list[dict[str, Any]]:
    events = [json.loads(line) for line in Path(path).read_text().splitlines()]
    return [e for e in events if e.get("event") == "trial"]


def top_trials(path: str, n: int = 8) -> list[list[Any]]:
    """The search log's n fastest proved trials: [node, ms, J, template knobs, reason]."""
    rows = []
    for e in _trials(path):
        if e.get("status") == "ok" and e.get("median_ms"):
            c = e.get("candidate") or {}
            knobs = ",".join(f"{k}={v}" for k, v in sorted((c.get("knobs") or {}).items()))
            rows.append([e["id"], e["median_ms"], e.get("energy_j"),
                         f"{c.get('template')} {knobs}", e.get("reason")])  # fmt: skip
    return sorted(rows, key=lambda r: r[1])[:n]


def energy_moves(path: str) -> int:
    """Trials the proposer made for objective "energy" (fewer warps/stages/splits, larger
    tiles) that the search measured."""
    return sum(1 for e in _trials(path) if e.get("reason") == "objective:energy")


def compare(row: dict[str, Any]) -> dict[str, Any]:
    m = row["measured"]
    t, e = m["time"], m["energy"]
    if t["J"] and e["J"] and t["ms"]:
        row["energy_vs_time"] = {"J": e["J"] / t["J"] - 1, "ms": e["ms"] / t["ms"] - 1}
    w = row.get("worker", {})
    wt, we = w.get("time", {}), w.get("energy", {})
    if wt.get("J") and we.get("J") and wt.get("ms"):
        row["worker_energy_vs_time"] = {"J": we["J"] / wt["J"] - 1, "ms": we["ms"] / wt["ms"] - 1}
    row["verdict"] = verdict(row)
    return row
