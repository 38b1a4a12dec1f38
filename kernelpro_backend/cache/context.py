"""Kernels a warm-up measured slower in their model than the fallback they replace, and the
ones a warm-up found but has not yet checked in their model.

A kernel wins its subgraph's search alone, against the fallback compiling that subgraph alone;
in the whole graph the split can cost more than it saves (Inductor no longer fuses across the
subgraph's edges, tensors it kept in registers go to memory). The warm-up's in-context check
(warmup/incontext.py) times the model's step with and without each kernel and records here the
ones that lost, with its figures; the finder then runs the fallback for them and does not search
them again. A kernel a warm-up finds is *held* until its check settles it: a warm-up cut short
before its check (a deadline, a crash) leaves kernels no step has vouched for, and a later
compile runs the fallback for them rather than kernels that won only alone (on an H200,
GPT-2 small with 48 such kernels ran 0.95x Inductor, BENCHMARKS.md).

Owns: `context.json` in the cache directory ({digest: record} for kernels, lost or held, and
{"graph:<fingerprint>": {"options": ...}} for the torch-level rewrites a warm-up measured
slower on one whole graph, {"judged:<key>": {"keep": ..., "kept": [kernel ids]}} for a
compile's own verdict on a graph with its kernels, rewrite/judged.py), read once per process
and rewritten whole with paths.atomic_write.
Must not: time anything or decide what lost (warmup/incontext.py does).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..paths import atomic_write
from .artifact import utc_now

log = logging.getLogger("kernelpro.cache")

HELD = "held"  # a record's flag: found by a warm-up, not yet checked in its model


class ContextVerdicts:
    """{cache digest: why its kernel stays unused}, as the in-context check left it."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._records: dict[str, dict[str, Any]] | None = None
        self._told: set[tuple[str, str]] = set()

    def _load(self) -> dict[str, dict[str, Any]]:
        if self._records is None:
            self._records = {}
            try:
                data = json.loads(self.path.read_text())
                if isinstance(data, dict):
                    self._records = {str(k): v for k, v in data.items() if isinstance(v, dict)}
            except FileNotFoundError:
                pass
            except (OSError, ValueError) as e:  # a bad file must not stop a compile
                log.warning("ignoring unreadable %s (%s)", self.path, e)
        return self._records

    def rejected(self, digest: str) -> dict[str, Any] | None:
        """The record of a kernel measured slower in context (said once per process), or
        None."""
        record = self._load().get(digest) if not digest.startswith("graph:") else None
        if record is None or record.get(HELD):
            return None
        self._say_once(
            "lost", digest, logging.INFO,
            "kernelpro cache: %s kernel %s lost inside its model at warm-up (%s); running the "
            "fallback", record.get("pattern", ""), digest[:12], record.get("why", ""),
        )  # fmt: skip
        return record

    def _say_once(self, kind: str, digest: str, level: int, message: str, *args: Any) -> None:
        if (kind, digest) not in self._told:
            self._told.add((kind, digest))
            log.log(level, message, *args)

    def reject(self, digest: str, **record: Any) -> None:
        """Record (and write at once) that `digest`'s kernel lost in its model."""
        self._write(digest, record)

    def held(self, digest: str, say: bool = True) -> dict[str, Any] | None:
        """The record of a kernel found by a warm-up whose in-context check has not settled it
        (with `say`, warned once per process: a compile runs the fallback for it), or None."""
        record = self._load().get(digest)
        if record is None or not record.get(HELD):
            return None
        if say:
            self._say_once(
                "held", digest, logging.WARNING,
                "kernelpro cache: %s kernel %s was found by a warm-up of %s whose in-context "
                "check has not run (cut short?); running the fallback until `kernelpro warmup` "
                "finishes that check",
                record.get("pattern", ""), digest[:12], record.get("model", "a model"),
            )  # fmt: skip
        return record

    def set_aside(self, digest: str, serve_held: bool = False) -> dict[str, Any] | None:
        """Why `digest`'s kernel stays unused: lost in context, or held (unless `serve_held`,
        the warm-up's own finders); None when it may run."""
        return self.rejected(digest) or (None if serve_held else self.held(digest))

    def hold(self, digest: str, **record: Any) -> None:
        """Hold `digest`'s kernel until an in-context check settles it (written at once); a
        kernel already recorded as lost stays lost."""
        current = self._load().get(digest)
        if current is not None and not current.get(HELD):
            return
        self._write(digest, {**record, HELD: True})

    def settle(self, digests: Iterable[str]) -> None:
        """The check passed these kernels: no longer held (lost ones stay lost)."""
        records = self._load()
        gone = [d for d in digests if (records.get(d) or {}).get(HELD)]
        if gone:
            for digest in gone:
                del records[digest]
            self._save(records)

    # Options a warm-up measured better off for one whole graph (backend.graph_fingerprint):
    # only the torch-level rewrites, which a kernel verdict cannot undo.
    GRAPH_OPTIONS = ("rewrite_linear_cross_entropy", "rewrite_attention")

    def graph_options(self, fingerprint: str) -> dict[str, bool]:
        """{option: False} for the rewrites that lost on the graph `fingerprint`."""
        return self._turned_off(self._load().get(f"graph:{fingerprint}"))

    def graph_verdicts(self) -> dict[str, dict[str, Any]]:
        """{fingerprint: record} of the graphs with a rewrite turned off (what a bundle ships),
        each record's "options" as `graph_options` reads them; one read of the file."""
        verdicts = {}
        for name, record in self._load().items():
            off = self._turned_off(record) if name.startswith("graph:") else {}
            if off:
                verdicts[name.removeprefix("graph:")] = {**record, "options": off}
        return verdicts

    @classmethod
    def _turned_off(cls, record: dict[str, Any] | None) -> dict[str, bool]:
        options = (record or {}).get("options")
        if not isinstance(options, dict):
            return {}
        return {k: False for k, v in options.items() if k in cls.GRAPH_OPTIONS and v is False}

    def set_graph_options(self, fingerprint: str, options: dict[str, bool], **record: Any) -> None:
        """Record (and write at once) options measured better for the graph `fingerprint`."""
        self.add_graph_options([(fingerprint, options, record)])

    def add_graph_options(
        self, verdicts: Iterable[tuple[str, dict[str, bool], dict[str, Any]]]
    ) -> None:
        """`set_graph_options` for many graphs, (fingerprint, options, record) each, written
        once (a bundle's verdicts: one write, not one per verdict)."""
        records, now = self._load(), utc_now()
        for fingerprint, options, record in verdicts:
            records[f"graph:{fingerprint}"] = {"options": options, **record, "time": now}
        self._save(records)

    # Compiles' own in-context verdicts (rewrite/judged.py): {"judged:<graph key>": {"keep": ...}}.
    def judged(self, key: str) -> dict[str, Any] | None:
        """The verdict a compile recorded for the graph-with-kernels `key`, or None."""
        record = self._load().get(f"judged:{key}")
        return record if isinstance(record, dict) and "keep" in record else None

    def set_judged(self, key: str, record: dict[str, Any]) -> None:
        """Record (and write at once) a compile's verdict on the graph-with-kernels `key`."""
        self._write(f"judged:{key}", record)

    def _write(self, name: str, record: dict[str, Any]) -> None:
        records = self._load()
        records[name] = {**record, "time": utc_now()}
        self._save(records)

    def _save(self, records: dict[str, dict[str, Any]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps(records, indent=1, sort_keys=True))

    def __len__(self) -> int:
        return len(self._load())
