"""Measuring one subgraph's candidates in the process's worker pool.

Owns: `PoolMeasurer`, the search's measurer for one subgraph: one base `Job` (the reference
pickled once), the two-stage feedback plan (roofline, then `options.search_tools`; ncu only
for candidates that beat the best so far), jobs kept in flight with `submit`/`collect` up to
the memory plan's concurrency, and the eager/Inductor baselines.
Must not: choose candidates, start or stop the pool (searcher.py leases it) or judge results.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from typing import Any

from ..fx_passes import Subgraph
from ..options import Options
from ..profilers.ceilings import Ceilings
from ..profilers.roofline import classify
from ..profilers.speed_of_light import SpeedOfLight
from ..runtime import BaselineCandidate, Job, WorkerPool
from ..runtime.feedback import FeedbackPlan, subgraph_roofs
from ..runtime.result import EvalResult


class PoolMeasurer:
    """Evaluates `subgraph`'s candidates in `pool`, at most `capacity` at a time."""

    def __init__(
        self,
        options: Options,
        pool: WorkerPool,
        subgraph: Subgraph,
        ceilings: Ceilings | None,
        capacity: int,
        exact_reference: bool = True,
    ) -> None:
        self.options = options
        self.pool = pool
        self.subgraph = subgraph
        self.capacity = max(1, capacity)
        self.ceilings = ceilings
        self.best_ms: float | None = None  # fastest OK candidate so far
        self._work = SpeedOfLight.work(subgraph)
        self._roofs = subgraph_roofs(self._work, ceilings, subgraph.precision) if ceilings else None
        self._base = Job.from_subgraph(
            subgraph,
            BaselineCandidate("eager"),
            measure_energy=options.objective == "energy",
            ceilings=ceilings,
        )
        self._base = dataclasses.replace(
            self._base,
            timing_budget_s=options.timing_s,
            timing_settle=options.timing_settle,
            timing_heat_s=options.timing_heat_s,
            exact_reference=exact_reference,
        ).for_fallback(options.fallback)
        self._tickets: dict[int, Hashable] = {}

    def feedback_plan(self) -> FeedbackPlan | None:
        """What each worker runs after timing a candidate: the roofline, then the allowed
        stage-2 tools; ncu only below the best time so far (none yet: no limit)."""
        if self._roofs is None:
            return None
        return FeedbackPlan(
            roofs=self._roofs,
            tools=tuple(self.options.search_tools),
            ncu_below_ms=self.best_ms,
            ncu_run_timeout_s=self.options.ncu_run_timeout_s,
        )

    def baselines(self, subgraph: Any = None) -> dict[str, EvalResult]:
        jobs = self._base.baselines()
        names = [j.candidate.name for j in jobs]  # type: ignore[union-attr]
        return dict(zip(names, self.pool.evaluate_many(jobs), strict=True))

    def submit(
        self, subgraph: Any, candidate: Hashable, abandon_above_ms: float | None = None
    ) -> int:
        job = dataclasses.replace(
            self._base.with_candidate(candidate),
            feedback=self.feedback_plan(),
            abandon_above_ms=abandon_above_ms,
        )
        ticket = self.pool.submit(job)
        self._tickets[ticket] = candidate
        return ticket

    def collect(self) -> list[tuple[int, EvalResult]]:
        """Finished (ticket, result) pairs; blocks until there is at least one."""
        out = []
        for ticket, result in sorted(self.pool.collect().items()):
            candidate = self._tickets.pop(ticket, None)
            if candidate is None:
                continue  # a job of another user of the pool
            if result.ok and result.median_ms and not result.details.get("abandoned"):
                self.best_ms = min(result.median_ms, self.best_ms or float("inf"))
            out.append((ticket, self._with_roofline(candidate, result)))
        return out

    def measure(self, subgraph: Any, candidates: Sequence[Hashable]) -> list[EvalResult]:
        """One result per candidate, in order (the batch form of submit/collect)."""
        tickets = [self.submit(subgraph, c) for c in candidates]
        done: dict[int, EvalResult] = {}
        while len(done) < len(tickets):
            done.update(self.collect())
        return [done[t] for t in tickets]

    def _with_roofline(self, candidate: object, result: EvalResult) -> EvalResult:
        """The worker's findings; the roofline here only when an OK result came back without
        one (its feedback failed: details["feedback_error"], or it was abandoned)."""
        if not result.ok or result.median_ms is None or self._roofs is None:
            return result
        if any(f.tool == "roofline" for f in result.findings):
            return result
        knobs = dict(getattr(candidate, "knobs", ()) or ())
        report = classify(
            result.median_ms, self._work.flops, self._work.bytes, self._roofs, knobs=knobs
        )
        return dataclasses.replace(result, findings=(*report.findings, *result.findings))
