"""The search log (JSON lines, format in COMMON.md: start / trial / end events) and the progress
line on stderr.

Owns: writing those events and that line, and the fields they carry beside the search's own:
a trial's stage-2 tools and joules, the baselines' joules, a proposer's counters, the account
of an objective-"energy" choice.
Must not: decide anything; `kernelpro report` (bench) renders the log.
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any, TextIO

from ..runtime.result import EvalResult


class SearchLog:
    """Appends events to `path` (None: no log). One write per line, so concurrent searches
    writing the same file keep whole lines."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = Path(path) if path is not None else None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, event: dict[str, Any]) -> None:
        if self.path is None:
            return
        data = (json.dumps(event, sort_keys=True, default=str) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def start(self, **fields: Any) -> None:
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        self.write({"event": "start", **fields, "time": now})

    def trial(self, **fields: Any) -> None:
        self.write({"event": "trial", **fields})

    def end(self, **fields: Any) -> None:
        self.write({"event": "end", **fields})


class ProgressLine:
    """`kernelpro softmax [3f2a91c0] trial 12/64  best 1.34x  71% of SOL  2.10 trials/s`,
    redrawn in place."""

    def __init__(self, stream: TextIO | None, label: str, max_trials: int) -> None:
        self.stream, self.label, self.max_trials = stream, label, max_trials

    def update(
        self,
        trial: int,
        speedup: float | None,
        sol_fraction: float | None,
        trials_per_s: float | None = None,
    ) -> None:
        if self.stream is None:
            return
        best = f"{speedup:.2f}x" if speedup is not None else "-"
        sol = f"{100 * sol_fraction:.0f}% of SOL" if sol_fraction is not None else "SOL unknown"
        rate = f"  {trials_per_s:.2f} trials/s" if trials_per_s is not None else ""
        self.stream.write(
            f"\rkernelpro {self.label} trial {trial}/{self.max_trials}  best {best}  {sol}{rate}"
        )
        self.stream.flush()

    def finish(self, message: str) -> None:
        if self.stream is None:
            return
        self.stream.write(f"  {message}\n")
        self.stream.flush()


def trial_fields(result: EvalResult) -> dict[str, Any]:
    """Which stage-2 tools ran on the candidate and why the others did not, when the measurer
    says (the worker's feedback puts them in details)."""
    keys = ("tools_run", "tools_skipped", "feedback_error", "energy")
    out = {k: result.details[k] for k in keys if k in result.details}
    return out if result.energy_j is None else {**out, "energy_j": result.energy_j}


def baseline_energies(baselines: dict[str, EvalResult]) -> dict[str, Any]:
    """The baselines' joules per call, when measured (objective "energy")."""
    found = {k: v.energy_j for k, v in baselines.items() if v.energy_j is not None}
    return {"baseline_energy_j": found} if found else {}


def proposer_stats(proposer: object) -> dict[str, Any] | None:
    """A proposer's counters, if it keeps any (the LLM proposer: requests, tokens, latency)."""
    stats = getattr(proposer, "stats", None)
    return dict(stats()) if callable(stats) else None


def stats_delta(
    before: dict[str, Any] | None, after: dict[str, Any] | None
) -> dict[str, Any] | None:
    """What one search added to the counters (a proposer may serve several searches)."""
    if after is None:
        return None
    return {
        k: v - before.get(k, 0) if before and _number(v) and _number(before.get(k, 0)) else v
        for k, v in after.items()
    }


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def energy_note(why: dict[str, Any]) -> str:
    """The progress line's account of an objective-"energy" choice (`Choice.why`): the winner's
    joules and time against the fastest candidate's."""
    won, fastest = why.get("winner") or {}, why.get("fastest") or {}
    if not won.get("j") or not fastest.get("j") or not fastest.get("ms"):
        return f"; energy: {why['rule']}" if why.get("rule") else ""
    if won.get("node") == fastest.get("node"):
        return f"; energy: the fastest, {won['j'] * 1e3:.4g} mJ/call ({why['rule']})"
    saved = 1 - won["j"] / fastest["j"]
    slower = (won["ms"] or 0.0) / fastest["ms"] - 1
    return (
        f"; energy: {won['j'] * 1e3:.4g} mJ/call, {100 * saved:.1f}% fewer joules than the "
        f"fastest at {100 * slower:+.1f}% time"
    )
