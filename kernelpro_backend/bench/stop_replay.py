"""Replay searches' reward trajectories through the budget's stop rules (search/budget.py):
where today's rules stop each search against the rules its log ran under, and the trials and
seconds that saves.

    python -m kernelpro_backend.cli.sweeps stop-replay CACHE_DIR/logs ... [--save trajectories.json]
    python -m kernelpro_backend.cli.sweeps stop-replay trajectories.json

A search log (one JSON line per event, `CACHE_DIR/logs/<key>.jsonl`) gives each trial's
status, reward and elapsed time in completion order, the budget and how the search ended; the
best reward after each trial is what the live tracker saw. `--save` keeps only that, small
enough to commit beside the figures it supports.

Owns: the replay of logged trajectories. Must not: run a search or change the budget's rules
(search/budget.py holds them).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from kernelpro_backend.search.budget import Budget, BudgetTracker


def trajectory(log: Path) -> dict:
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    trials = [r for r in rows if r.get("event") == "trial"]
    end: dict = next((r for r in rows if r.get("event") == "end"), {})
    rewards = [t.get("reward") if t.get("status") == "ok" else None for t in trials]
    return {
        "key": log.stem[:12], "pattern": rows[0].get("pattern"), "budget": rows[0]["budget"],
        "rewards": rewards, "elapsed_s": [t.get("elapsed_s") for t in trials],
        "ended": end.get("reason"), "winner": end.get("winner"),
    }  # fmt: skip


def replay(t: dict, **changes: object) -> tuple[int, str | None]:
    """(the trial after which the rules stop the search, the rule), under today's rules with
    `changes` to the logged budget; (all trials, None) when none stops it early. A live search
    then still finishes the candidates in flight, whatever rule stopped it."""
    fields = Budget.__dataclass_fields__
    budget = {k: v for k, v in t["budget"].items() if k in fields} | changes
    tracker = BudgetTracker(Budget(**budget))  # type: ignore[arg-type]
    best = None
    for i, reward in enumerate(t["rewards"]):
        if reward is not None:
            best = reward if best is None else max(best, reward)
        tracker.record(best, None)
        tracker.started = tracker.clock()  # wall time is the log's, not this replay's
        reason = tracker.stop_reason()
        if reason is not None:
            return i + 1, reason
    return len(t["rewards"]), None


def _elapsed(t: dict, trial: int) -> float:
    return float(t["elapsed_s"][trial - 1] or 0.0) if trial else 0.0


def replay_report(sources: list[Path], save: str | None = None) -> int:
    """Print each search's end under the rules it ran with and under today's."""
    found: list[dict] = []
    for source in sources:
        if source.is_dir():
            found += [trajectory(log) for log in sorted(source.glob("*.jsonl"))]
        else:
            found += json.loads(source.read_text())
    if save:
        Path(save).write_text(json.dumps(found, indent=0))
    print(f"{'key':<14}{'pattern':<22}{'trials':>7}{'best':>7}  {'ended':<11}{'winner':<10}now")
    total_trials = total_s = 0.0
    for t in found:
        # the rules the log ran under: those of its budget, "behind" only if it names it
        then, _ = replay(t, **({} if "behind_gap" in t["budget"] else {"behind_gap": None}))
        now, reason = replay(t)
        ok = [r for r in t["rewards"] if r is not None]
        best = f"{math.exp(max(ok)):.2f}x" if ok else "-"
        change = "-"
        if now < then:
            saved = _elapsed(t, then) - _elapsed(t, now)
            change = f"{reason} {then - now} trials earlier (-{saved:.1f} s)"
            total_trials, total_s = total_trials + then - now, total_s + saved
        print(
            f"{t['key']:<14}{str(t['pattern'])[:21]:<22}{len(t['rewards']):>7}{best:>7}  "
            f"{str(t['ended']):<11}{str(t['winner']):<10}{change}"
        )
    print(
        f"{len(found)} searches; today's rules stop them {total_trials:.0f} trials, "
        f"{total_s:.1f} s earlier"
    )
    return 0
