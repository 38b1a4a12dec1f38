"""The miss manifest: which subgraphs ran on the fallback because the cache had no kernel.

Owns: `misses.jsonl` in the cache directory, one JSON object per distinct cache key (key JSON,
pattern, kind, ops, input metas, graph kind, time; for an instance of a symbolic subgraph its
family and dynamic sizes). `kernelpro warmup` reads it to know what to
search. Appends are single `write` calls on an O_APPEND file under an advisory lock, so several
processes can record misses at once without tearing lines or duplicating keys.
Must not: read or write kernel entries.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..fx_passes import Subgraph
from .artifact import utc_now
from .toolchain import CacheKey

log = logging.getLogger("kernelpro.cache")

try:
    import fcntl
except ImportError:  # Windows: no advisory lock; readers still deduplicate
    fcntl = None  # type: ignore[assignment]


class MissManifest:
    """Append-only, deduplicated record of cache misses."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._seen: set[str] = set()

    def record(self, key: CacheKey, subgraph: Subgraph, reason: str | None = None) -> bool:
        """Record a miss (and why it was not searched, when it was skipped); False when this
        key was already recorded."""
        if key.digest in self._seen:
            return False
        line = json.dumps(
            {
                "digest": key.digest,
                "key": key.to_dict(),
                "pattern": subgraph.pattern,
                "kind": subgraph.kind,
                "ops": subgraph.ops,
                "inputs": [[list(s), list(st), dt] for s, st, dt in subgraph.input_meta],
                "graph": subgraph.graph,
                "time": utc_now(),
                **({"reason": reason} if reason else {}),
                # An instance of a symbolic subgraph: its family and dynamic sizes, so that
                # `kernelpro cache misses` can say which sizes of which subgraph to warm up.
                **(
                    {"family": subgraph.family, "dynamic_sizes": list(subgraph.dynamic_sizes)}
                    if subgraph.family
                    else {}
                ),
            },
            sort_keys=True,
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with _locked_append(self.path) as fd:
            if key.digest in self._digests_on_disk():
                self._seen.add(key.digest)
                return False
            os.write(fd, (line + "\n").encode())
        self._seen.add(key.digest)
        return True

    def entries(self) -> list[dict[str, Any]]:
        """Recorded misses, first occurrence of each key; unparsable lines are skipped."""
        out, seen = [], set()
        for record in self._read():
            if record["digest"] not in seen:
                seen.add(record["digest"])
                out.append(record)
        return out

    def keys(self) -> list[CacheKey]:
        return [CacheKey.from_dict(r["key"]) for r in self.entries()]

    def _digests_on_disk(self) -> set[str]:
        return {r["digest"] for r in self._read()}

    def _read(self) -> Iterator[dict[str, Any]]:
        if not self.path.exists():
            return
        with self.path.open(encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                try:
                    record = json.loads(line)
                    if isinstance(record, dict) and isinstance(record.get("digest"), str):
                        yield record
                        continue
                except json.JSONDecodeError:
                    pass
                log.warning("skipping unreadable line %d of %s", n, self.path)


@contextlib.contextmanager
def _locked_append(path: Path) -> Iterator[int]:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # closing releases the lock
