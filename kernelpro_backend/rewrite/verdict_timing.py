"""Timing two variants of one compiled graph against each other on the graph's own calls.

Both variants compute the same function (every kernel was proved), so the graph's first calls,
with the user's own inputs, take turns between them, each call timed on the device with events
read when they are ready (no synchronisation per call). After `WARMUP` calls of each variant
(Inductor's first calls autotune and load code) come `ROUNDS` pairs of timed calls, in A-B-B-A
order so a drift favours neither; the candidate wins only if it is faster beyond noise: its
median at least `MARGIN` below the reference's, and faster in `KEEP_SHARE` of the pairs
(`decide`). A trial may take another margin (objective "energy", verdict_plan.py): a negative
one lets the candidate be that much slower (median, and in `KEEP_SHARE` of the pairs), a larger
one asks it to be that much faster.

Owns: `Trial` (one candidate against one reference: the alternation and the timing), `decide`
(the rule), `Verdict`, the clocks (`DeviceClock` for CUDA, `HostClock` for the CPU).
Must not: compile graphs, choose which variants to time (verdict_plan.py) or record verdicts.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

# Calls of each variant before any is timed: Inductor's first calls autotune, load modules and
# warm the allocator.
WARMUP = 2
# Pairs of timed calls a verdict is read from.
ROUNDS = 8
# The candidate must take the graph's median time at least this far below the reference's:
# within it a graph gains nothing from the change and risks what two medians do not show.
MARGIN = 0.01
# ...and make the graph faster in this share of the pairs (6 of 8; under pure noise 6 or more
# of 8 come 14% of the time).
KEEP_SHARE = 6 / 8


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A candidate's and a reference's figures (ms, one per timed call) and the rule's reading.
    For the first trial of a graph the candidate is the graph with all its kernels and the
    reference the fallback's own graph ("with" and "without" them)."""

    keep: bool
    with_ms: tuple[float, ...]
    without_ms: tuple[float, ...]
    margin: float = MARGIN  # the rule's margin (`decide`)

    @property
    def slack(self) -> float:
        """How much slower than the reference a pair may be and still count (a negative
        margin's size; 0: only faster pairs count)."""
        return max(0.0, -self.margin)

    @property
    def wins(self) -> int:
        """The pairs the candidate won: faster, or not slower beyond the slack."""
        pairs = zip(self.with_ms, self.without_ms, strict=True)
        return sum(a < b * (1 + self.slack) for a, b in pairs)

    @property
    def with_median(self) -> float:
        return statistics.median(self.with_ms)

    @property
    def without_median(self) -> float:
        return statistics.median(self.without_ms)

    @property
    def ratio(self) -> float:
        """The candidate's median over the reference's (below 1: faster)."""
        return self.with_median / self.without_median if self.without_median > 0 else 1.0

    @property
    def cost_s(self) -> float:
        """The device time of the trial's calls, its warm-up calls taken at the medians."""
        warm = WARMUP * (self.with_median + self.without_median)
        return (sum(self.with_ms) + sum(self.without_ms) + warm) / 1e3

    def describe(self) -> str:
        won = f"not slower beyond {self.slack:.0%}" if self.slack else "faster"
        return (
            f"{self.with_median:.4f} ms a call with the kernels, {self.without_median:.4f} ms "
            f"without ({won} with them in {self.wins} of {len(self.with_ms)} pairs)"
        )

    def record(self) -> dict[str, Any]:
        """What the cache keeps of it (cache/context.py)."""
        return {
            "keep": self.keep,
            "with_ms": round(self.with_median, 6),
            "without_ms": round(self.without_median, 6),
            "wins": self.wins,
            "rounds": len(self.with_ms),
            **({"margin": self.margin} if self.margin != MARGIN else {}),
        }


def decide(
    with_ms: Sequence[float], without_ms: Sequence[float], margin: float = MARGIN
) -> Verdict:
    """The candidate wins only if its median is `margin` below the reference's and it wins
    `KEEP_SHARE` of the pairs (`Verdict.wins`): by default, faster beyond noise (module
    docstring)."""
    verdict = Verdict(False, tuple(with_ms), tuple(without_ms), margin)
    ahead = verdict.with_median < verdict.without_median * (1 - margin)
    return dataclasses.replace(verdict, keep=ahead and verdict.wins >= KEEP_SHARE * len(with_ms))


class Clock(Protocol):
    """Times one call: `start()` before it, `stop(token)` after, `read(mark)` the ms once known
    (None while the device has not reached the end), `wait(mark)` the ms, blocking."""

    def start(self) -> Any: ...

    def stop(self, token: Any) -> Any: ...

    def read(self, mark: Any) -> float | None: ...

    def wait(self, mark: Any) -> float: ...


class DeviceClock:
    """CUDA events on the current stream: the time between the call's first and last launch
    reaching the device, host gaps included when the device waits on the host."""

    def start(self) -> Any:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def stop(self, token: Any) -> Any:
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        return token, end

    def read(self, mark: Any) -> float | None:
        start, end = mark
        return float(start.elapsed_time(end)) if end.query() else None

    def wait(self, mark: Any) -> float:
        start, end = mark
        end.synchronize()
        return float(start.elapsed_time(end))


class HostClock:
    """The host's clock, for graphs that run on the CPU (synchronous)."""

    def start(self) -> Any:
        return time.perf_counter()

    def stop(self, token: Any) -> Any:
        return (time.perf_counter() - token) * 1e3

    def read(self, mark: Any) -> float | None:
        return float(mark)

    def wait(self, mark: Any) -> float:
        return float(mark)


class Trial:
    """`candidate` against `reference`, each called with one list of inputs as AOTAutograd
    calls a compiled graph; `verdict` is set by the call that completes the rounds."""

    def __init__(
        self,
        candidate: Callable[..., Any],
        reference: Callable[..., Any],
        clock: Clock,
        margin: float = MARGIN,
    ) -> None:
        self._variants = (candidate, reference)
        self._clock, self._margin = clock, margin
        self._calls = 0
        self._pending: list[tuple[int, int, Any]] = []  # (variant, pair, mark)
        self._times: list[dict[int, float]] = [{}, {}]  # variant -> {pair: ms}
        self.verdict: Verdict | None = None

    def __call__(self, args: list[Any]) -> Any:
        turn = self._calls
        self._calls += 1
        if turn < 2 * WARMUP:
            return self._variants[turn % 2](args)
        pair, second = divmod(turn - 2 * WARMUP, 2)
        # A-B, then B-A: a drift within the rounds favours neither variant.
        variant = second if pair % 2 == 0 else 1 - second
        token = self._clock.start()
        out = self._variants[variant](args)
        self._pending.append((variant, pair, self._clock.stop(token)))
        self._collect(block=turn + 1 == 2 * (WARMUP + ROUNDS))
        return out

    def _collect(self, block: bool) -> None:
        waiting = []
        for variant, pair, mark in self._pending:
            ms = self._clock.wait(mark) if block else self._clock.read(mark)
            if ms is None:
                waiting.append((variant, pair, mark))
            else:
                self._times[variant][pair] = ms
        self._pending = waiting
        if all(len(t) == ROUNDS for t in self._times):
            pairs = range(ROUNDS)
            self.verdict = decide(
                [self._times[0][p] for p in pairs],
                [self._times[1][p] for p in pairs],
                self._margin,
            )
            self._variants = (_released, _released)


def _released(args: list[Any]) -> Any:
    raise RuntimeError("kernelpro: a settled trial was called again (a bug in rewrite/judged.py)")
