"""`optimize(subgraph, ...)`: one search of one subgraph, from baselines to winner.

Owns: the loop that asks the tree for candidates, has the measurer measure them, tells the tree,
applies the budget and its early stopping rules, chooses the winner against the baselines, and
writes the search log and progress line; `SearchOutcome`, what the backend caches.
Must not: compile, validate or time anything itself (the measurer does), or parse profiler
output (findings travel typed from the measurer to the proposer).
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from collections.abc import Callable, Hashable
from typing import Any, TextIO

from ..runtime.result import EvalResult
from .budget import EXHAUSTED, Budget, BudgetTracker
from .log import (
    ProgressLine,
    SearchLog,
    baseline_energies,
    energy_note,
    proposer_stats,
    stats_delta,
    trial_fields,
)
from .measure import AsyncMeasurer, Batched, Measurer
from .memory import SearchMemory
from .proposer import Proposer
from .rules import RuleProposer
from .space import SearchSpace
from .tree import SearchTree, TreeParams
from .winner import OBJECTIVES, Choice, Measured, choose_winner, fastest_baseline, replaces

_log = logging.getLogger("kernelpro")

# A candidate whose warm-up runs are this much slower than the best proved time is timed no
# further and not proved: it cannot win, and at real sizes proving costs seconds.
ABANDON_RATIO = 1.5


@dataclasses.dataclass(frozen=True)
class SearchOutcome:
    subgraph: str  # key digest
    winner: Hashable | str  # the winning candidate, or "eager" / "inductor": keep the fallback
    winner_id: int | None  # tree node of a winning candidate
    result: EvalResult | None  # the winner's measurement
    baselines: dict[str, EvalResult]
    best_id: int | None  # fastest working candidate, even when a baseline won
    best_result: EvalResult | None
    trials: int
    trials_saved: int  # by the SOL/plateau rules, against budget.max_trials
    stop_reason: str
    tree: dict[str, Any]  # SearchTree.summary()
    # The pick of each objective's rule from these same measurements (the "energy" one shows a
    # saving only where joules were measured); `under` gives the outcome as another rule picks.
    choices: dict[str, Choice] = dataclasses.field(default_factory=dict)

    def under(self, objective: str) -> SearchOutcome:
        """This search's outcome had `objective`'s rule chosen, from the same candidates."""
        c = self.choices[objective]
        return dataclasses.replace(self, winner=c.winner, winner_id=c.node_id, result=c.result)

    @property
    def uses_fallback(self) -> bool:
        return isinstance(self.winner, str)

    @property
    def speedup_vs_inductor(self) -> float | None:
        ind = self.baselines.get("inductor")
        if ind is None or not ind.ok or self.result is None or not self.result.median_ms:
            return None
        return (ind.median_ms or 0.0) / self.result.median_ms


def optimize(
    subgraph: Any,
    *,
    space: SearchSpace,
    measurer: Measurer | AsyncMeasurer,
    proposer: Proposer | None = None,
    budget: Budget,
    memory: SearchMemory | None = None,
    seed: int = 0,
    log_path: str | None = None,
    progress: bool = True,
    objective: str = "time",
    min_gain_ms: float = 0.0,
    batch_size: int = 1,
    params: TreeParams | None = None,
    clock: Callable[[], float] = time.monotonic,
    stream: TextIO | None = None,
    tree_out: list[SearchTree] | None = None,
    fixed_s: dict[str, float] | None = None,
    header: dict[str, Any] | None = None,
) -> SearchOutcome:
    """Search `subgraph` for a kernel faster than its fallback within `budget`.

    Up to `batch_size` candidates are in flight at once: with an AsyncMeasurer (`submit`/
    `collect`) a new one starts as soon as one finishes; a plain Measurer measures them in
    batches. The budget's wall time starts after the baselines; `fixed_s` (costs paid before
    the search, e.g. the pool's start) is logged with the baselines' own time; `header`'s
    fields (the device's power cap) go into the log's start event.
    `tree_out`, if given, receives the SearchTree (for inspection and tests)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; use one of {OBJECTIVES}")
    async_measurer: Any = measurer if hasattr(measurer, "submit") else Batched(measurer)  # type: ignore[arg-type]
    search = _Search(
        subgraph,
        space,
        async_measurer,
        proposer or RuleProposer(objective=objective),
        budget,
        memory if memory is not None else SearchMemory(None),
        SearchLog(log_path),
        clock,
    )
    fixed = dict(fixed_s or {})
    started = clock()
    search.baselines = dict(async_measurer.baselines(subgraph))
    fixed["baselines"] = round(clock() - started, 3)
    fixed.update(_baseline_phases(search.baselines))
    stream = (stream or sys.stderr) if progress else None
    search.start(seed, params, objective, fixed, tree_out, stream, header or {})
    search.min_gain_ms = min_gain_ms
    reason = search.run(max(1, batch_size))
    return search.finish(reason, objective, min_gain_ms)


class _Search:
    """The state of one search: tree, tracker, log and what is in flight."""

    def __init__(
        self,
        subgraph: Any,
        space: SearchSpace,
        measurer: AsyncMeasurer,
        proposer: Proposer,
        budget: Budget,
        memory: SearchMemory,
        log: SearchLog,
        clock: Callable[[], float],
    ) -> None:
        self.subgraph, self.space, self.measurer = subgraph, space, measurer
        self.proposer, self.budget, self.memory, self.log = proposer, budget, memory, log
        self.clock = clock
        self.digest = _digest(subgraph)
        self.proposer_before = proposer_stats(proposer)
        self.baselines: dict[str, EvalResult] = {}
        self.measured: list[Measured] = []
        self.in_flight: dict[int, int] = {}  # ticket -> node id
        self.started_at: dict[int, float] = {}  # ticket -> clock at its submit
        self.best_result: EvalResult | None = None  # the fastest proved candidate so far
        self.min_gain_ms = 0.0
        self.phase_totals: dict[str, float] = {}

    def start(
        self,
        seed: int,
        params: TreeParams | None,
        objective: str,
        fixed: dict[str, float],
        tree_out: list[SearchTree] | None,
        stream: TextIO | None,
        header: dict[str, Any],
    ) -> None:
        base = fastest_baseline(self.baselines)
        self.reference_ms = base[1].median_ms if base else None
        self.tree = SearchTree(
            self.subgraph,
            self.space,
            self.proposer,
            reference_ms=self.reference_ms,
            memory=self.memory,
            seed=seed,
            params=params,
        )
        if tree_out is not None:
            tree_out.append(self.tree)
        self.tracker = BudgetTracker(self.budget, self.clock)  # the budget starts now
        self.fixed = fixed
        pattern = str(getattr(self.subgraph, "pattern", "?"))
        self.line = ProgressLine(stream, f"{pattern} [{self.digest[:8]}]", self.budget.max_trials)
        self.log.start(
            subgraph=self.digest,
            pattern=pattern,
            kind=str(getattr(self.subgraph, "kind", "?")),
            sol_ms=next((r.sol_ms for r in self.baselines.values() if r.sol_ms), None),
            baselines={k: v.median_ms for k, v in self.baselines.items()},
            baseline_errors={
                k: f"{v.status.value}: {v.message}"[:400]
                for k, v in self.baselines.items()
                if not v.ok
            },
            budget=self.budget.to_dict(),
            objective=objective,
            seed=seed,
            proposer=self.proposer.name,
            fixed_s=fixed,
            **baseline_energies(self.baselines),
            **header,
        )

    def run(self, capacity: int) -> str:
        """Keep up to `capacity` candidates in flight until a stop rule fires (what is in
        flight then is still collected) or the tree has nothing left."""
        while True:
            reason = self.tracker.stop_reason()
            if reason is None:
                self._fill(capacity)
            if not self.in_flight:
                return reason or EXHAUSTED
            for ticket, result in self.measurer.collect():
                node_id = self.in_flight.pop(ticket, None)
                if ticket in self.started_at:
                    self.tracker.note_latency(self.clock() - self.started_at.pop(ticket))
                if node_id is not None:
                    self._tell(node_id, result)
                if out_of_memory(result) and capacity > 1:
                    # The memory plan was optimistic: one fewer in flight, so the next
                    # candidates do not fail the same way one after another (measured on
                    # H100: a 4 GiB softmax lost 8 trials in a row before this).
                    capacity -= 1
                    _log.warning(
                        "%s %s ran out of GPU memory; %d candidate(s) in flight from now on",
                        getattr(self.subgraph, "graph", "?"),
                        getattr(self.subgraph, "pattern", "?"),
                        capacity,
                    )

    def _fill(self, capacity: int) -> None:
        while len(self.in_flight) < capacity:
            if self.tracker.remaining_trials() - len(self.in_flight) <= 0:
                return
            batch = self.tree.ask(1)
            if not batch:
                return
            node_id, candidate = batch[0]
            limit = self.best_ms * ABANDON_RATIO if self.best_ms else None
            ticket = self.measurer.submit(self.subgraph, candidate, abandon_above_ms=limit)
            self.in_flight[ticket] = node_id
            self.started_at[ticket] = self.clock()

    @property
    def best_ms(self) -> float | None:
        return self.best_result.median_ms if self.best_result else None

    @property
    def best_sol(self) -> float | None:
        return self.best_result.sol_fraction if self.best_result else None

    def _would_win(self) -> bool:
        """Whether the best candidate so far would replace the fallback by the winner rule
        (faster than the fastest baseline beyond both spreads and by `min_gain_ms`; a
        candidate's own host surcharge aside): the speed-of-light rule stops only such a
        search (budget.BudgetTracker says why)."""
        base = fastest_baseline(self.baselines)
        if base is None:
            return True
        return self.best_result is not None and replaces(
            self.best_result, base[1], self.min_gain_ms
        )

    def _tell(self, node_id: int, result: EvalResult) -> None:
        reward = self.tree.tell(node_id, result)
        node = self.tree.nodes[node_id]
        self.measured.append(Measured(node_id, node.candidate, result))
        proved = result.ok and not result.details.get("abandoned")
        if (
            proved
            and result.median_ms
            and (self.best_ms is None or result.median_ms < self.best_ms)
        ):
            self.best_result = result
        best_reward = self.tree.best_reward if self.tree.best_reward > -1e300 else None
        self.tracker.record(best_reward, self.best_sol, self._would_win())
        phases = dict(result.details.get("phase_s") or {})
        for name, seconds in phases.items():
            self.phase_totals[name] = self.phase_totals.get(name, 0.0) + float(seconds)
        self.log.trial(
            id=node_id,
            parent=node.parent or None,
            depth=self.tree.depth(node_id),
            candidate=self.space.describe(node.candidate),
            move=node.move,
            reason=node.reason,
            status=result.status.value,
            median_ms=result.median_ms,
            speedup=_ratio(self.reference_ms, result.median_ms) if result.ok else None,
            sol_fraction=result.sol_fraction,
            reward=reward,
            findings=[f.to_dict() for f in result.findings],
            message=result.message,
            phase_s=phases,
            elapsed_s=round(self.tracker.elapsed(), 3),
            **trial_fields(result),
        )
        rate = self.tracker.trials / max(self.tracker.elapsed(), 1e-9)
        self.line.update(
            self.tracker.trials, _ratio(self.reference_ms, self.best_ms), self.best_sol, rate
        )

    def finish(self, reason: str, objective: str, min_gain_ms: float) -> SearchOutcome:
        surcharge = getattr(self.space, "surcharge_ms", None)
        choices = {
            rule: choose_winner(self.measured, self.baselines, rule, min_gain_ms, surcharge)
            for rule in OBJECTIVES
        }
        choice = choices[objective]
        tracker = self.tracker
        outcome = SearchOutcome(
            subgraph=self.digest,
            winner=choice.winner,
            winner_id=choice.node_id,
            result=choice.result,
            baselines=self.baselines,
            best_id=choice.best.node_id if choice.best else None,
            best_result=choice.best.result if choice.best else None,
            trials=tracker.trials,
            trials_saved=tracker.trials_saved(reason),
            stop_reason=reason,
            tree=self.tree.summary(),
            choices=choices,
        )
        search_s = tracker.elapsed()
        why = _why_few(reason, tracker.trials, self.budget, self.measured)
        self.log.end(
            winner=choice.node_id if choice.node_id is not None else choice.winner,
            best_ms=choice.result.median_ms if choice.result else None,
            speedup_vs_inductor=outcome.speedup_vs_inductor,
            trials=tracker.trials,
            trials_saved_by_sol=outcome.trials_saved,
            reason=reason,
            why=why,
            tree=outcome.tree,
            fixed_s=self.fixed,
            search_s=round(search_s, 3),
            trials_per_s=round(tracker.trials / search_s, 3) if search_s > 0 else None,
            phase_s={k: round(v, 3) for k, v in self.phase_totals.items()},
            proposer_stats=stats_delta(self.proposer_before, proposer_stats(self.proposer)),
            **({"energy_choice": choice.why} if choice.why else {}),
        )
        won = "fallback" if outcome.uses_fallback else f"kernel #{choice.node_id}"
        text = f"{reason}: {won} wins ({choice.winner if outcome.uses_fallback else ''})"
        text = text.replace(" ()", "") + energy_note(choice.why)
        self.line.finish(text + (f"; {why}" if why else ""))
        return outcome


def _baseline_phases(baselines: dict[str, EvalResult]) -> dict[str, float]:
    """Each baseline's load (Inductor: its compile) and total seconds in the worker."""
    out: dict[str, float] = {}
    for name, result in baselines.items():
        phases = result.details.get("phase_s") or {}
        out[f"{name}_load"] = round(float(phases.get("load", 0.0)), 3)
        out[f"{name}_total"] = round(sum(float(v) for v in phases.values()), 3)
    return out


def _why_few(reason: str, trials: int, budget: Budget, measured: list[Measured]) -> str | None:
    """Why a search stopped with one trial or none: the budget against the first trial's cost."""
    if trials > 1:
        return None
    if not measured:
        return f"{reason} before any candidate finished"
    phases = dict(measured[0].result.details.get("phase_s") or {})
    total = sum(float(v) for v in phases.values())
    slowest = max(phases.items(), key=lambda kv: float(kv[1]), default=("?", 0.0))
    return (
        f"{reason} after 1 trial: it took {total:.1f} s of the {budget.max_seconds:g} s budget, "
        f"most of it in {slowest[0]} ({float(slowest[1]):.1f} s)"
    )


def out_of_memory(result: EvalResult) -> bool:
    """Whether a candidate failed for lack of GPU memory (not for anything it did)."""
    return not result.ok and ("OutOfMemoryError" in result.message
                              or "out of memory" in result.message.lower())  # fmt: skip


def _ratio(reference_ms: float | None, ms: float | None) -> float | None:
    return reference_ms / ms if reference_ms and ms else None


def _digest(subgraph: Any) -> str:
    try:
        return str(subgraph.key.digest)
    except (AttributeError, ValueError):
        return "unkeyed"
