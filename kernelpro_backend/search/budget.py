"""How long one subgraph may be searched, and the rules that stop a search early.

Owns: `Budget` (trials, wall time, speed-of-light and plateau stopping, the bandwidth target of
memory-bound subgraphs) and `BudgetTracker`,
which turns the history of a search into a stop reason and the trials the early rules saved.
Must not: choose candidates.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

# Stop reasons, as written to the search log's "end" event.
MAX_TRIALS = "max_trials"
MAX_SECONDS = "max_seconds"
SOL = "sol"
PLATEAU = "plateau"
BEHIND = "behind"  # far slower than the fallback, and closing the gap too slowly to catch it
EXHAUSTED = "exhausted"  # the tree has nothing left to try
EARLY_REASONS = (SOL, PLATEAU, BEHIND)
# "behind" applies from this gap on: the best candidate under 0.8x of the fastest baseline (log
# units). The float32 IEEE GEMMs of a training MLP searched 40-45 trials (~20 s each) at
# 0.47-0.57x of cuBLAS, gaining a few % per 16 trials: none could have reached the fallback.
BEHIND_GAP = 0.22
PLATEAU_TRIALS = 16  # the plateau window with few candidates in flight
PLATEAU_GENERATIONS = 3  # ... and at least this many rounds of what is in flight
LATENCY_WINDOW = 8  # the latest candidate latencies the wall-time rule looks at


@dataclasses.dataclass(frozen=True)
class Budget:
    """Per-subgraph budget. `max_seconds`: the search's wall time from after the baselines; no
    candidate starts that is expected to finish past it. `sol_stop_fraction`: stop once the
    best candidate reaches this fraction of speed of light (None: never).
    `plateau_trials`/`plateau_eps`: stop when the last N trials improved the best reward by
    less than eps (log units, 0.01 ~ 1%; None: never).
    `behind_gap`: stop when the best candidate is this far below the fastest baseline (log
    units) and the last N trials' gain, kept up over the trials left, would not close the gap
    (None: never; off with the plateau rule, whose window it uses)."""

    max_trials: int = 64
    max_seconds: float = 120.0
    sol_stop_fraction: float | None = 0.9
    plateau_trials: int | None = PLATEAU_TRIALS
    plateau_eps: float = 0.01
    behind_gap: float | None = BEHIND_GAP
    # A memory-bound subgraph has a bandwidth target, not just a ratio: the plateau rule does
    # not stop its search while the best candidate is under this fraction of the DRAM bound
    # (it runs to the target, max_trials or max_seconds). None: plateau stops as usual.
    bandwidth_target: float | None = None

    def __post_init__(self) -> None:
        if self.max_trials < 1 or self.max_seconds <= 0:
            raise ValueError(
                f"budget needs max_trials >= 1 and max_seconds > 0, got {self.max_trials} "
                f"trials and {self.max_seconds} s"
            )
        if self.sol_stop_fraction is not None and not 0 < self.sol_stop_fraction <= 1:
            raise ValueError(
                f"sol_stop_fraction is a fraction of speed of light in (0, 1], got "
                f"{self.sol_stop_fraction}; use None to disable the rule"
            )
        if self.behind_gap is not None and self.behind_gap <= 0:
            raise ValueError(
                f"behind_gap is a log speed gap > 0 (0.22: under 0.8x), got {self.behind_gap}; "
                "use None to disable the rule"
            )
        if self.plateau_trials is not None and self.plateau_trials < 1:
            raise ValueError(f"plateau_trials must be >= 1 or None, got {self.plateau_trials}")
        if self.bandwidth_target is not None and not 0 < self.bandwidth_target <= 1:
            raise ValueError(
                f"bandwidth_target is a fraction in (0, 1], got {self.bandwidth_target}"
            )

    @classmethod
    def from_options(
        cls, options: Any, in_flight: int = 1, bandwidth_target: float | None = None
    ) -> Budget:
        """From `kernelpro_backend.options.Options` (max_trials, budget_s). The plateau window
        is at least three generations of `in_flight` candidates: with 8 in flight, 16 trials
        are two rounds, and the tree has had one round to act on what the first taught it
        (measured on H100: most KernelBench searches stopped on plateau at 24-30 trials)."""
        plateau = max(PLATEAU_TRIALS, PLATEAU_GENERATIONS * in_flight)
        return cls(
            max_trials=int(options.max_trials),
            max_seconds=float(options.budget_s),
            plateau_trials=plateau,
            bandwidth_target=bandwidth_target,
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class BudgetTracker:
    """Counts trials and time of one search and says when to stop."""

    def __init__(self, budget: Budget, clock: Callable[[], float] = time.monotonic) -> None:
        self.budget = budget
        self.clock = clock
        self.started = clock()
        self.trials = 0
        self.best_sol_fraction: float | None = None
        # The SOL rule stops only a search whose best candidate would already replace the
        # fallback (`ahead`): near the speed of light a candidate behind a baseline, or ahead
        # of it within the timing's spread (a tie, which keeps the fallback), can only win by
        # searching on. H100, bf16 8192^3 (BENCHMARKS.md, GEMM sweep, 2026-11-26 evening):
        # stopped after 7 trials at 1.592 ms, 1.6% ahead of both baselines in its pool but
        # within their spread, so nothing was kept; the sweep's other configurations ran
        # 1.479-1.575 ms in the same runs.
        self.ahead = True
        # best reward after 0, 1, 2, ... trials (None until something worked)
        self.best_history: list[float | None] = [None]
        # seconds from a candidate's start to its result, the latest LATENCY_WINDOW of them
        self.latencies: list[float] = []

    def record(
        self, best_reward: float | None, best_sol_fraction: float | None, ahead: bool = True
    ) -> None:
        """Record one finished trial and the best reward / SOL fraction after it; `ahead`:
        whether the best candidate would replace the fallback now (True without baselines)."""
        self.trials += 1
        self.best_history.append(best_reward)
        self.best_sol_fraction = best_sol_fraction
        self.ahead = ahead

    def note_latency(self, seconds: float) -> None:
        """Record how long one candidate took from its start to its result (compile, proof
        and timing, and its wait for a worker or the GPU)."""
        self.latencies = [*self.latencies, max(0.0, seconds)][-LATENCY_WINDOW:]

    def expected_latency(self) -> float:
        """What a candidate started now is expected to take: the median of the latest
        latencies (0 before any result)."""
        if not self.latencies:
            return 0.0
        ordered = sorted(self.latencies)
        return ordered[len(ordered) // 2]

    def elapsed(self) -> float:
        return self.clock() - self.started

    def remaining_trials(self) -> int:
        return max(0, self.budget.max_trials - self.trials)

    def stop_reason(self) -> str | None:
        b = self.budget
        if self.trials >= b.max_trials:
            return MAX_TRIALS
        # No candidate starts that would finish past the wall time: the ones in flight are
        # still collected, so a search that started candidates up to its last second ran a
        # latency past it (H100 warm-ups: 24-38 s for 20 s budgets on the conv searches).
        if self.elapsed() + self.expected_latency() >= b.max_seconds:
            return MAX_SECONDS
        if (
            b.sol_stop_fraction is not None
            and self.ahead
            and self.best_sol_fraction is not None
            and self.best_sol_fraction >= b.sol_stop_fraction
        ):
            return SOL
        n = b.plateau_trials
        short = b.bandwidth_target is not None and (
            self.best_sol_fraction is None or self.best_sol_fraction < b.bandwidth_target
        )
        if n is not None and self.trials >= n and not short:
            now, then = self.best_history[-1], self.best_history[-1 - n]
            gain = 0.0 if now is None else now - (then if then is not None else float("-inf"))
            if gain < b.plateau_eps:
                return PLATEAU
            if self._behind(now, gain, n):
                return BEHIND
        return None

    def _behind(self, best: float | None, gain: float, window: int) -> bool:
        """The best is `behind_gap` or more below the fastest baseline (reward 0), and the
        last window's gain, kept up over the trials left, would not reach it."""
        gap = self.budget.behind_gap
        if gap is None or best is None or -best < gap:
            return False
        return gain / window * self.remaining_trials() < -best

    def trials_saved(self, reason: str) -> int:
        """Trials the early rules (SOL, plateau) saved against the full trial budget."""
        return self.budget.max_trials - self.trials if reason in EARLY_REASONS else 0
