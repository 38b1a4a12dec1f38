"""Search memory: which moves helped on which kind of subgraph, across searches and runs.

Owns: `MoveRecord`, the JSON-lines file of records (one line per record, appended with O_APPEND
so concurrent searches can share it; corrupt lines are skipped with a log line), and
`SearchMemory.prior`, the expected gain of a move that proposers and the tree use to order and
choose children.
Must not: choose candidates itself or store anything but the records (no candidates, no code).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from ..paths import CacheLayout

log = logging.getLogger("kernelpro.search")

# Shrinkage of the prior towards 0 (pseudo-records of gain 0): one lucky record of +0.5 gives a
# prior of +0.25, not +0.5.
PSEUDO_COUNT = 1.0
# Weight of a record by how closely its subgraph resembles the one searched.
SAME_PATTERN, SAME_KIND = 1.0, 0.3
SAME_BOTTLENECK, OTHER_BOTTLENECK = 1.0, 0.5


@dataclasses.dataclass(frozen=True)
class MoveRecord:
    """A move applied to a candidate of a subgraph, and what it gained: the child's reward minus
    the parent's (log units: +0.1 is ~10% faster; failures count with their penalty)."""

    kind: str
    pattern: str
    bottleneck: str | None
    move: str
    gain: float

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MoveRecord:
        return cls(
            kind=str(d["kind"]),
            pattern=str(d["pattern"]),
            bottleneck=None if d.get("bottleneck") is None else str(d["bottleneck"]),
            move=str(d["move"]),
            gain=float(d["gain"]),
        )


def default_memory_path(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """`<cache_dir>/search_memory.jsonl` under the cache directory rule (paths.py)."""
    return CacheLayout.of(cache_dir).search_memory


class SearchMemory:
    """Records of moves and their gains; `path=None` keeps them in memory only (tests, dry runs)."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._by_move: dict[str, list[MoveRecord]] = defaultdict(list)
        self.reload()

    def reload(self) -> None:
        """Re-read the file (other processes may have appended to it)."""
        self._by_move.clear()
        if self.path is None or not self.path.exists():
            return
        with open(self.path, encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    record = MoveRecord.from_dict(json.loads(line))
                except (ValueError, KeyError, TypeError) as e:
                    log.warning(
                        "search memory %s line %d is corrupt (%s); skipping it",
                        self.path,
                        number,
                        e,
                    )
                    continue
                self._by_move[record.move].append(record)

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_move.values())

    def record(self, record: MoveRecord) -> None:
        self._by_move[record.move].append(record)
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = (record.to_json() + "\n").encode()
        # One write() of one short line on an O_APPEND descriptor: concurrent writers never
        # interleave inside a line on a local file system.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def prior(self, kind: str, pattern: str, bottleneck: str | None, move: str) -> float:
        """Expected gain of `move` on a subgraph of this kind/pattern/bottleneck, shrunk towards
        0; 0.0 when nothing is known."""
        total = weight = 0.0
        for r in self._by_move.get(move, ()):
            if r.kind != kind:
                continue
            w = SAME_PATTERN if r.pattern == pattern else SAME_KIND
            w *= SAME_BOTTLENECK if r.bottleneck == bottleneck else OTHER_BOTTLENECK
            total += w * r.gain
            weight += w
        return total / (weight + PSEUDO_COUNT)
