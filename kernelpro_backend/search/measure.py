"""What a search measures with: the measurer protocols, and a plain measurer run as an
asynchronous one.

Owns: `Measurer` (measure a batch, measure the baselines), `AsyncMeasurer` (submit / collect:
candidates in flight, as tuner.measurer.PoolMeasurer does) and `Batched`.
Must not: measure anything itself.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Protocol

from ..runtime.result import EvalResult

__all__ = ["AsyncMeasurer", "Batched", "Measurer"]


class Measurer(Protocol):
    def measure(self, subgraph: Any, candidates: Sequence[Hashable]) -> list[EvalResult]:
        """One EvalResult per candidate, same order (expected failures are results)."""
        ...

    def baselines(self, subgraph: Any) -> dict[str, EvalResult]:
        """{"eager": ..., "inductor": ...}, measured like candidates."""
        ...


class AsyncMeasurer(Protocol):
    """A measurer that keeps candidates in flight (tuner.measurer.PoolMeasurer)."""

    def baselines(self, subgraph: Any) -> dict[str, EvalResult]: ...

    def submit(
        self, subgraph: Any, candidate: Hashable, abandon_above_ms: float | None = None
    ) -> int:
        """Start measuring `candidate`; returns a ticket."""
        ...

    def collect(self) -> list[tuple[int, EvalResult]]:
        """Block until at least one submitted candidate is done; (ticket, result) pairs."""
        ...


class Batched:
    """A plain `Measurer` as an AsyncMeasurer: what was submitted is measured in one call."""

    def __init__(self, inner: Measurer) -> None:
        self.inner = inner
        self.queue: list[tuple[int, Hashable]] = []
        self.next = 0

    def baselines(self, subgraph: Any) -> dict[str, EvalResult]:
        return self.inner.baselines(subgraph)

    def submit(
        self, subgraph: Any, candidate: Hashable, abandon_above_ms: float | None = None
    ) -> int:
        self.subgraph = subgraph
        self.next += 1
        self.queue.append((self.next, candidate))
        return self.next

    def collect(self) -> list[tuple[int, EvalResult]]:
        batch, self.queue = self.queue, []
        results = self.inner.measure(self.subgraph, [c for _, c in batch])
        if len(results) != len(batch):
            raise RuntimeError(
                f"measurer returned {len(results)} results for {len(batch)} candidates; "
                "it must return exactly one EvalResult per candidate, in order"
            )
        return [(t, r) for (t, _), r in zip(batch, results, strict=True)]
