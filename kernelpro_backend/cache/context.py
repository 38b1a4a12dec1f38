"""Kernels a warm-up measured slower in their model than the fallback they replace.

A kernel wins its subgraph's search alone, against the fallback compiling that subgraph alone;
in the whole graph the split can cost more than it saves (Inductor no longer fuses across the
subgraph's edges, tensors it kept in registers go to memory). The warm-up's in-context check
(incontext.py) times the model's step with and without each kernel and records here the ones that
lost, with its figures; the finder then runs the fallback for them and does not search them
again.

Owns: `context.json` in the cache directory ({digest: record} for kernels, and
{"graph:<fingerprint>": {"options": ...}} for the torch-level rewrites a warm-up measured
slower on one whole graph), read once per process and rewritten whole with paths.atomic_write.
Must not: time anything or decide what lost (incontext.py does).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from ..paths import atomic_write
from .artifact import utc_now

log = logging.getLogger("kernelpro.cache")


class ContextVerdicts:
    """{cache digest: why its kernel stays unused}, as the in-context check left it."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._records: dict[str, dict[str, Any]] | None = None
        self._told: set[str] = set()

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
                log.warning("kernelpro cache: ignoring unreadable %s (%s)", self.path, e)
        return self._records

    def rejected(self, digest: str) -> dict[str, Any] | None:
        """The record of a kernel measured slower in context (said once per process), or
        None."""
        record = self._load().get(digest) if not digest.startswith("graph:") else None
        if record is not None and digest not in self._told:
            self._told.add(digest)
            log.info(
                "kernelpro cache: %s kernel %s lost inside its model at warm-up (%s); running "
                "the fallback",
                record.get("pattern", ""),
                digest[:12],
                record.get("why", ""),
            )
        return record

    def reject(self, digest: str, **record: Any) -> None:
        """Record (and write at once) that `digest`'s kernel lost in its model."""
        self._write(digest, record)

    # Options a warm-up measured better off for one whole graph (backend.graph_fingerprint):
    # only the torch-level rewrites, which a kernel verdict cannot undo.
    GRAPH_OPTIONS = ("rewrite_linear_cross_entropy", "rewrite_attention")

    def graph_options(self, fingerprint: str) -> dict[str, bool]:
        """{option: False} for the rewrites that lost on the graph `fingerprint`."""
        record = self._load().get(f"graph:{fingerprint}") or {}
        options = record.get("options")
        if not isinstance(options, dict):
            return {}
        return {k: False for k, v in options.items() if k in self.GRAPH_OPTIONS and v is False}

    def set_graph_options(self, fingerprint: str, options: dict[str, bool], **record: Any) -> None:
        """Record (and write at once) options measured better for the graph `fingerprint`."""
        self._write(f"graph:{fingerprint}", {"options": options, **record})

    def _write(self, name: str, record: dict[str, Any]) -> None:
        records = self._load()
        records[name] = {**record, "time": utc_now()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps(records, indent=1, sort_keys=True))

    def __len__(self) -> int:
        return len(self._load())
