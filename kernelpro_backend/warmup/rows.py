"""What a warm-up found per subgraph, and the provider wrapper that notes it: each lookup's
row, the kernels held until the in-context check (cache/context.py), the search stopped at its
share of a deadline.

Owns: `WarmupRow`, `_Recording`, `CHECK_SHARE`. Must not: search or time steps (the finder
and incontext.py do).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..fx_passes import Subgraph
from ..rewrite.providers import Kernel, KernelProvider

log = logging.getLogger("kernelpro.warmup")


@dataclasses.dataclass
class WarmupRow:
    graph: str
    pattern: str
    key: str
    result: str  # "kernel", "fallback", "symbolic"
    seconds: float
    shape: str = ""  # the example inputs' shapes ("2x512x768"), when several are warmed
    count: int = 1  # the step's subgraphs with this key (a planned warm-up: one row per key)
    note: str = ""  # a planned warm-up: what became of the key (found, cached, not reached...)


# The share of a warm-up's deadline kept for its in-context check (a few compiles of the
# whole model, each timed for about a second).
CHECK_SHARE = 0.35


def _finder_of(provider: Any) -> Any:
    """The KernelFinder behind a provider (the distributed finder wraps one), or None."""
    for candidate in (provider, getattr(provider, "inner", None)):
        if candidate is not None and hasattr(candidate, "serve_held"):
            return candidate
    return None


class _Recording:
    """Wraps a provider and notes what it returned for each subgraph; with `held` (a set), holds
    each kernel its searches find until the in-context check (cache/context.py); past
    `search_until` (time.perf_counter()) misses are no longer searched."""

    def __init__(self, inner: KernelProvider, rows: list[WarmupRow]) -> None:
        self.inner = inner
        self.rows = rows
        self.shape = ""  # the example shape being warmed
        self.finder = _finder_of(inner)
        self.held: set[str] | None = None  # the digests held, when the check will run
        self.model = ""
        self.search_until: float | None = None
        self.planned = False  # the searches ran from a plan: a compile queues no builds
        self.find_s = 0.0  # seconds in lookups and the searches they ran

    def arm(
        self, model: torch.nn.Module, started: float, deadline_s: float | None, checks: bool
    ) -> float | None:
        """Hold what is found when the in-context check will judge it, and stop searching
        at the deadline's search share; returns the deadline (time.perf_counter())."""
        if checks and torch.cuda.is_available() and self.finder is not None:
            self.held, self.model = set(), type(model).__name__
            self.finder.serve_held = True
        if deadline_s is None:
            return None
        self.search_until = started + deadline_s * (1 - CHECK_SHARE)
        return started + deadline_s

    def prepare(self, subgraphs: Sequence[Subgraph]) -> None:
        prepare = getattr(self.inner, "prepare", None)
        # the ranks of a distributed warm-up agree here (the search)
        if prepare is not None and not self.planned:
            t0 = time.perf_counter()
            prepare(subgraphs)
            self.find_s += time.perf_counter() - t0
            log.info(
                "%d subgraph(s) agreed with the other ranks in %.1f s",
                len(subgraphs),
                time.perf_counter() - t0,
            )

    def prestart(self) -> None:
        start = getattr(self.inner, "prestart", None)
        if start is not None:  # the search's workers boot while the model compiles
            start()

    def find(self, subgraph: Subgraph) -> Kernel | None:
        return self._record(subgraph, self.inner.find)

    def family_known(self, family: str) -> bool:
        known = getattr(self.inner, "family_known", None)
        return bool(known is not None and known(family))

    def find_dynamic(self, subgraph: Subgraph) -> Kernel | None:
        """An instance of a symbolic subgraph, met by its shape dispatcher (rewrite/dispatch.py)."""
        return self._record(subgraph, getattr(self.inner, "find_dynamic", self.inner.find))

    def hold(self, digest: str, subgraph: Subgraph) -> None:
        """A kernel this warm-up's search found: held until its in-context check, if one runs."""
        if self.held is not None and self.finder is not None:
            self.held.add(digest)
            self.finder.cache.context.hold(digest, pattern=subgraph.pattern, model=self.model)

    def _uncached(self, subgraph: Subgraph) -> str | None:
        """The subgraph's digest when this warm-up holds its finds and the cache has no entry
        for it yet, else None."""
        if self.held is None or self.finder is None:
            return None
        key = self.finder.cache.key_for(subgraph.key)
        if key.digest in self.held:
            return None
        hit = self.finder.cache_op("read", lambda: self.finder.cache.lookup(key))
        return key.digest if hit is None else None

    def _record(
        self, subgraph: Subgraph, find: Callable[[Subgraph], Kernel | None]
    ) -> Kernel | None:
        t0 = time.perf_counter()
        if self.search_until is not None and t0 > self.search_until and self.finder is not None:
            if self.finder.searching:
                log.warning(
                    "the search's share of the deadline is spent; the "
                    "subgraphs left keep the fallback (a later warm-up searches them), the "
                    "rest of the time is the in-context check's"
                )
            self.finder.searching = False
        new = self._uncached(subgraph)
        kernel = find(subgraph)
        if kernel is not None and new is not None:
            # found by this warm-up's search: held until its check (what the cache had before
            # keeps its standing: another model's check may have passed it)
            self.hold(new, subgraph)
        self.find_s += time.perf_counter() - t0
        self.rows.append(
            WarmupRow(
                subgraph.graph,
                subgraph.pattern,
                subgraph.key.short(),
                "kernel" if kernel is not None else "fallback",
                time.perf_counter() - t0,
                self.shape,
            )
        )
        row = self.rows[-1]
        log.info(
            "[%d] %s %s %s: %s (%.1f s)",
            len(self.rows),
            row.graph,
            row.pattern,
            row.key,
            row.result,
            row.seconds,
        )
        return kernel
