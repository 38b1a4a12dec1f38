"""The search log (JSON lines, format in COMMON.md: start / trial / end events) and the progress
line on stderr.

Owns: writing those events and that line.
Must not: decide anything; `kernelpro report` (bench) renders the log.
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any, TextIO


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
