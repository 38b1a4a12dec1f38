"""`optimize(subgraph, ...)`: one search of one subgraph, from baselines to winner.

Owns: the loop that asks the tree for candidates, has the measurer measure them, tells the tree,
applies the budget and its early stopping rules, chooses the winner against the baselines, and
writes the search log and progress line; `SearchOutcome`, what the backend caches.
Must not: compile, validate or time anything itself (the measurer does), or parse profiler
output (findings travel typed from the measurer to the proposer).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol, TextIO

from ..runtime.result import EvalResult
from .budget import EXHAUSTED, Budget, BudgetTracker
from .log import ProgressLine, SearchLog
from .memory import SearchMemory
from .proposer import Proposer
from .rules import RuleProposer
from .space import SearchSpace
from .tree import SearchTree, TreeParams
from .winner import OBJECTIVES, Measured, choose_winner, fastest_baseline


class Measurer(Protocol):
    def measure(self, subgraph: Any, candidates: Sequence[Hashable]) -> list[EvalResult]:
        """One EvalResult per candidate, same order (expected failures are results)."""
        ...

    def baselines(self, subgraph: Any) -> dict[str, EvalResult]:
        """{"eager": ..., "inductor": ...}, measured like candidates."""
        ...


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
    measurer: Measurer,
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
) -> SearchOutcome:
    """Search `subgraph` for a kernel faster than its fallback within `budget`.

    `batch_size` candidates are measured per call of `measurer.measure` (one per worker).
    `tree_out`, if given, receives the SearchTree (for inspection and tests)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; use one of {OBJECTIVES}")
    proposer = proposer or RuleProposer()
    proposer_before = _proposer_stats(proposer)
    # Without a persistent memory the search still learns within itself: a move that just
    # gained is tried first on the next node (moves generalise across the tree).
    memory = memory if memory is not None else SearchMemory(None)
    digest = _digest(subgraph)
    log = SearchLog(log_path)
    # Baselines (an Inductor compile among them) are a fixed cost outside the trial budget.
    baselines = dict(measurer.baselines(subgraph))
    tracker = BudgetTracker(budget, clock)
    base = fastest_baseline(baselines)
    reference_ms = base[1].median_ms if base else None
    sol_ms = next((r.sol_ms for r in baselines.values() if r.sol_ms), None)
    tree = SearchTree(
        subgraph,
        space,
        proposer,
        reference_ms=reference_ms,
        memory=memory,
        seed=seed,
        params=params,
    )
    if tree_out is not None:
        tree_out.append(tree)
    pattern = str(getattr(subgraph, "pattern", "?"))
    line = ProgressLine(
        (stream or sys.stderr) if progress else None, f"{pattern} [{digest[:8]}]", budget.max_trials
    )
    log.start(
        subgraph=digest,
        pattern=pattern,
        kind=str(getattr(subgraph, "kind", "?")),
        sol_ms=sol_ms,
        baselines={k: v.median_ms for k, v in baselines.items()},
        budget=budget.to_dict(),
        objective=objective,
        seed=seed,
        proposer=proposer.name,
    )

    measured: list[Measured] = []
    best_sol: float | None = None
    best_ms: float | None = None
    while True:
        reason = tracker.stop_reason()
        if reason is not None:
            break
        batch = tree.ask(min(batch_size, tracker.remaining_trials()))
        if not batch:
            reason = EXHAUSTED
            break
        results = measurer.measure(subgraph, [c for _, c in batch])
        if len(results) != len(batch):
            raise RuntimeError(
                f"measurer returned {len(results)} results for {len(batch)} candidates; "
                "it must return exactly one EvalResult per candidate, in order"
            )
        for (node_id, candidate), result in zip(batch, results, strict=True):
            reward = tree.tell(node_id, result)
            measured.append(Measured(node_id, candidate, result))
            if result.ok and result.median_ms and (best_ms is None or result.median_ms < best_ms):
                best_ms = result.median_ms
                best_sol = result.sol_fraction
            best_reward = tree.best_reward if measured and tree.best_reward > -1e300 else None
            tracker.record(best_reward, best_sol)
            node = tree.nodes[node_id]
            log.trial(
                id=node_id,
                parent=node.parent or None,
                candidate=space.describe(candidate),
                move=node.move,
                reason=node.reason,
                status=result.status.value,
                median_ms=result.median_ms,
                speedup=_ratio(reference_ms, result.median_ms) if result.ok else None,
                sol_fraction=result.sol_fraction,
                reward=reward,
                findings=[f.to_dict() for f in result.findings],
                message=result.message,
                **_profiling(result),
            )
            line.update(tracker.trials, _ratio(reference_ms, best_ms), best_sol)

    choice = choose_winner(measured, baselines, objective, min_gain_ms=min_gain_ms)
    saved = tracker.trials_saved(reason)
    outcome = SearchOutcome(
        subgraph=digest,
        winner=choice.winner,
        winner_id=choice.node_id,
        result=choice.result,
        baselines=baselines,
        best_id=choice.best.node_id if choice.best else None,
        best_result=choice.best.result if choice.best else None,
        trials=tracker.trials,
        trials_saved=saved,
        stop_reason=reason,
        tree=tree.summary(),
    )
    winner_ms = choice.result.median_ms if choice.result else None
    log.end(
        winner=choice.node_id if choice.node_id is not None else choice.winner,
        best_ms=winner_ms,
        speedup_vs_inductor=outcome.speedup_vs_inductor,
        trials=tracker.trials,
        trials_saved_by_sol=saved,
        reason=reason,
        tree=outcome.tree,
        proposer_stats=_stats_delta(proposer_before, _proposer_stats(proposer)),
    )
    won = "fallback" if outcome.uses_fallback else f"kernel #{choice.node_id}"
    line.finish(f"{reason}: {won} wins ({choice.winner if outcome.uses_fallback else ''})".strip())
    return outcome


def _profiling(result: EvalResult) -> dict[str, Any]:
    """Which stage-2 tools ran on the candidate and why the others did not, when the measurer
    says (the worker's feedback puts them in details)."""
    keys = ("tools_run", "tools_skipped", "feedback_error")
    return {k: result.details[k] for k in keys if k in result.details}


def _proposer_stats(proposer: Proposer) -> dict[str, Any] | None:
    """A proposer's counters, if it keeps any (the LLM proposer: requests, tokens, latency)."""
    stats = getattr(proposer, "stats", None)
    return dict(stats()) if callable(stats) else None


def _stats_delta(
    before: dict[str, Any] | None, after: dict[str, Any] | None
) -> dict[str, Any] | None:
    """What one search added to the counters (a proposer may serve several searches)."""
    if after is None:
        return None
    return {
        k: v - before.get(k, 0) if before and _number(v) and _number(before.get(k, 0)) else v
        for k, v in after.items()
    }


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _ratio(reference_ms: float | None, ms: float | None) -> float | None:
    return reference_ms / ms if reference_ms and ms else None


def _digest(subgraph: Any) -> str:
    try:
        return str(subgraph.key.digest)
    except (AttributeError, ValueError):
        return "unkeyed"
