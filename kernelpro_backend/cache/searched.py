"""The keys a warm-up searched whose fallback stayed fastest: a later warm-up goes on with the
next best of its plan instead of searching them again.

A search that finds a kernel leaves an entry in the store (a later plan sees a hit); one that
does not leaves nothing there, so without this record a resumed warm-up would spend its first
minutes repeating the searches that lost. The key's digest names the toolchain and the
generator's version (cache/toolchain.py): after an upgrade the keys differ and are searched
again. Delete the file to search them all again.

Owns: `searched.jsonl` in the cache directory (CacheLayout.searched), one JSON object per key
({"digest", "pattern", "budget_s", "time"}), appended as single writes under O_APPEND so that
concurrent warm-ups keep whole lines; unreadable lines are skipped.
Must not: decide what to search (tuner/plan.py) or read kernel entries.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from .artifact import utc_now

log = logging.getLogger("kernelpro.cache")


class SearchedKeys:
    """{digest} of keys searched without a kernel beating the fallback."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._digests: set[str] | None = None

    def __contains__(self, digest: object) -> bool:
        return digest in self._load()

    def add(self, digest: str, pattern: str, budget_s: float | None) -> None:
        if digest in self._load():
            return
        line = json.dumps(
            {"digest": digest, "pattern": pattern, "budget_s": budget_s, "time": utc_now()},
            sort_keys=True,
        )
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (line + "\n").encode())
            finally:
                os.close(fd)
        except OSError as e:  # a read-only or full cache must not stop a warm-up
            log.warning("cannot record a searched key in %s (%s)", self.path, e)
        self._load().add(digest)

    def _load(self) -> set[str]:
        if self._digests is None:
            self._digests = set()
            try:
                lines = self.path.read_text(encoding="utf-8", errors="replace").splitlines()
            except FileNotFoundError:
                lines = []
            except OSError as e:
                log.warning("ignoring unreadable %s (%s)", self.path, e)
                lines = []
            for n, line in enumerate(lines, 1):
                try:
                    record = json.loads(line)
                    self._digests.add(str(record["digest"]))
                except (ValueError, KeyError, TypeError):
                    log.warning("skipping unreadable line %d of %s", n, self.path)
        return self._digests
