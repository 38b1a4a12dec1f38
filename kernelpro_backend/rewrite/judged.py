"""The in-context verdict on one compiled graph: with kernelpro's kernels, or the fallback's own.

A kernel wins its search against the fallback compiling its subgraph alone, in a worker. Inside
the graph the fallback runs otherwise: Inductor fuses the subgraph's neighbours into it, picks
channels-last convolutions and its own cuDNN algorithms, and the kernel meets other cache state.
On 31 KernelBench problems on an H100 (search on a miss, 10 s a subgraph), three kernels that
had won alone made their problem slower than Inductor: a convolution's ATen call 0.78x, two
GroupNorm kernels (1.33x alone) 0.96x and 0.97x.

So a compile that installs kernels compiles the graph both ways, and the graph's first calls,
with the user's own inputs, take turns between the two variants (both compute the same
function: every kernel was proved), each call timed on the device with events read when they
are ready (no synchronisation per call). After `WARMUP` calls of each variant (Inductor's first
calls autotune and load code) and `ROUNDS` pairs of timed calls, in A-B-B-A order so a drift
favours neither, the kernels stay only if the graph with them is faster beyond noise: its
median at least `MARGIN` below the fallback's, and faster in `KEEP_SHARE` of the pairs. Else
the fallback's own graph runs from then on and the kernels' variant is released. The verdict
goes to `on_verdict` (the backend records it against the graph's fingerprint and the kernels'
ids, so a later compile of the same graph with the same kernels compiles only the winner).

Owns: `JudgedGraph` (the alternation and the timing), `decide` (the rule), `Verdict`, the
clocks (`DeviceClock` for CUDA, `HostClock` for the CPU).
Must not: compile graphs or choose kernels (backend.py and the provider do), or record verdicts
itself.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

log = logging.getLogger("kernelpro")

# Calls of each variant before any is timed: Inductor's first calls autotune, load modules and
# warm the allocator.
WARMUP = 2
# Pairs of timed calls the verdict is read from.
ROUNDS = 8
# The kernels must take the graph's median time at least this far below the fallback's: within
# it a graph gains nothing from them and risks what two medians do not show.
MARGIN = 0.01
# ...and make the graph faster in this share of the pairs (6 of 8; under pure noise 6 or more
# of 8 come 14% of the time).
KEEP_SHARE = 6 / 8


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The graph's figures with and without its kernels (ms, one per timed call) and the rule's
    reading of them."""

    keep: bool
    with_ms: tuple[float, ...]
    without_ms: tuple[float, ...]

    @property
    def wins(self) -> int:
        return sum(a < b for a, b in zip(self.with_ms, self.without_ms, strict=True))

    @property
    def with_median(self) -> float:
        return statistics.median(self.with_ms)

    @property
    def without_median(self) -> float:
        return statistics.median(self.without_ms)

    def describe(self) -> str:
        return (
            f"{self.with_median:.4f} ms a call with the kernels, {self.without_median:.4f} ms "
            f"without (faster with them in {self.wins} of {len(self.with_ms)} pairs)"
        )

    def record(self) -> dict[str, Any]:
        """What the cache keeps of it (cache/context.py)."""
        return {
            "keep": self.keep,
            "with_ms": round(self.with_median, 6),
            "without_ms": round(self.without_median, 6),
            "wins": self.wins,
            "rounds": len(self.with_ms),
        }


def decide(with_ms: Sequence[float], without_ms: Sequence[float]) -> Verdict:
    """Keep the kernels only if the graph with them is faster beyond noise (module docstring)."""
    verdict = Verdict(False, tuple(with_ms), tuple(without_ms))
    ahead = verdict.with_median < verdict.without_median * (1 - MARGIN)
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


class JudgedGraph:
    """A compiled graph called as AOTAutograd calls a compiler's result (one list of inputs,
    `_boxed_call`), served by `with_kernels` or `without` as described in the module docstring.
    `on_verdict` gets the verdict once, before the loser is released."""

    def __init__(
        self,
        with_kernels: Callable[..., Any],
        without: Callable[..., Any],
        clock: Clock,
        on_verdict: Callable[[Verdict], None],
        label: str = "graph",
    ) -> None:
        # An instance attribute: wrappers (torch._dynamo.disable around a backward) copy the
        # instance's __dict__, not its class's.
        self._boxed_call = True
        self._variants: list[Callable[..., Any] | None] = [with_kernels, without]
        self._clock, self._on_verdict, self._label = clock, on_verdict, label
        self._calls = 0
        self._pending: list[tuple[int, int, Any]] = []  # (variant, pair, mark)
        self._times: list[dict[int, float]] = [{}, {}]  # variant -> {pair: ms}
        self._chosen: Callable[..., Any] | None = None

    @property
    def settled(self) -> bool:
        return self._chosen is not None

    def __call__(self, args: list[Any]) -> Any:
        if self._chosen is not None:
            return self._chosen(args)
        turn = self._calls
        self._calls += 1
        if turn < 2 * WARMUP:
            return self._run(turn % 2, args)
        pair, second = divmod(turn - 2 * WARMUP, 2)
        # A-B, then B-A: a drift within the rounds favours neither variant.
        variant = second if pair % 2 == 0 else 1 - second
        token = self._clock.start()
        out = self._run(variant, args)
        self._pending.append((variant, pair, self._clock.stop(token)))
        self._collect(block=turn + 1 == 2 * (WARMUP + ROUNDS))
        return out

    def _run(self, variant: int, args: list[Any]) -> Any:
        run = self._variants[variant]
        assert run is not None
        return run(args)

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
            self._settle()

    def _settle(self) -> None:
        pairs = range(ROUNDS)
        verdict = decide([self._times[0][p] for p in pairs], [self._times[1][p] for p in pairs])
        self._chosen = self._variants[0 if verdict.keep else 1]
        self._variants = [None, None]  # the loser's compiled code and buffers go
        log.info(
            "in context, the %s graph %s its kernels: %s",
            self._label,
            "keeps" if verdict.keep else "drops",
            verdict.describe(),
        )
        try:
            self._on_verdict(verdict)
        except Exception as e:  # recording it is a nicety; the choice above is made
            log.warning("could not record the %s graph's verdict (%s)", self._label, e)


class VerdictStore(Protocol):
    """Where verdicts outlive the process (cache/context.py's ContextVerdicts)."""

    def judged(self, key: str) -> dict[str, Any] | None: ...

    def set_judged(self, key: str, record: dict[str, Any]) -> None: ...


def graph_key(code: str, inputs: Sequence[Any], kernels: Sequence[str]) -> str:
    """The identity of one aten graph with one set of kernels, across processes: its code as
    the fallback would compile it, its inputs' shapes, strides, dtypes and devices, the GPU
    model it runs on (a cache directory shared by two machines), and the kernels' ids (a new
    kernel for one of its subgraphs is judged again)."""
    metas = [
        (tuple(map(str, x.shape)), tuple(map(str, x.stride())), str(x.dtype), x.device.type)
        if isinstance(x, torch.Tensor)
        else type(x).__name__
        for x in inputs
    ]
    cuda = [x.device for x in inputs if isinstance(x, torch.Tensor) and x.device.type == "cuda"]
    gpu = torch.cuda.get_device_name(cuda[0]) if cuda else ""
    text = f"{code}\n{metas}\n{gpu}\n{sorted(kernels)}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class Judging:
    """The in-context verdict for one graph with `kernels` installed: what an earlier compile
    recorded under `key`, and the judgement of this one (`wrap`)."""

    def __init__(
        self,
        key: str,
        kernels: Sequence[str],
        store: VerdictStore | None,
        clock: Clock,
        label: str,
        on_verdict: Callable[[Verdict], None] | None = None,
    ) -> None:
        self.key, self.kernels, self._store = key, list(kernels), store
        self._clock, self._label, self._on_verdict = clock, label, on_verdict
        self.known: dict[str, Any] | None = None
        if store is not None:
            try:
                self.known = store.judged(key)
            except OSError as e:  # a bad cache must not stop a compile: judge again
                log.warning("in-context verdicts unreadable (%s); judging again", e)

    def runs_without(self) -> bool:
        """Whether an earlier compile found this graph slower with these kernels (said once)."""
        if self.known is None or self.known.get("keep", True):
            return False
        log.info(
            "the %s graph runs without its %d kernel(s): in context they made it "
            "slower (%s ms a call against %s without, judged %s)",
            self._label, len(self.kernels), self.known.get("with_ms"),
            self.known.get("without_ms"), self.known.get("time", "before"),
        )  # fmt: skip
        return True

    def wrap(
        self, with_kernels: Callable[..., Any], compile_without: Callable[[], Callable[..., Any]]
    ) -> Callable[..., Any]:
        """`with_kernels` itself where an earlier verdict kept them, else a JudgedGraph between
        it and the fallback's own graph (`compile_without()`, compiled now)."""
        if self.known is not None:
            return with_kernels
        try:
            without = compile_without()
        except Exception as e:  # a bug to report; the kernels' graph is proved and compiled
            log.warning(
                "the %s graph could not be compiled without its kernels beside the "
                "graph with them (%s: %s); running it with them, unjudged",
                self._label, type(e).__name__, str(e)[:300],
            )  # fmt: skip
            return with_kernels
        return JudgedGraph(with_kernels, without, self._clock, self._record, self._label)

    def _record(self, verdict: Verdict) -> None:
        if self._on_verdict is not None:
            self._on_verdict(verdict)
        if self._store is not None:
            record = {**verdict.record(), "graph": self._label, "kernels": self.kernels}
            self._store.set_judged(self.key, record)


def symbolic(inputs: Sequence[Any]) -> bool:
    """Whether a graph's inputs have symbolic sizes: its calls then come at different sizes, and
    two calls' times say nothing of the two variants (each size's kernel was proved and timed
    at that size behind its shape dispatcher, rewrite/dispatch.py)."""
    return any(
        isinstance(x, torch.SymInt)
        or (isinstance(x, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in x.shape))
        for x in inputs
    )


def default_clock(inputs: Sequence[Any]) -> Clock | None:
    """Device events for a graph with CUDA inputs; None (no judgement) for any other: kernels
    are only installed on CUDA devices."""
    cuda = any(isinstance(x, torch.Tensor) and x.device.type == "cuda" for x in inputs)
    return DeviceClock() if cuda else None


def judge(
    report: Any,
    code: str,
    inputs: Sequence[Any],
    store: VerdictStore | None,
    clock: Clock,
) -> Judging:
    """The judgement of one rewritten graph (`report`: rewrite/graph.py's RewriteReport, whose
    `in_context` and `verdict` it keeps current), keyed by the graph's code as the fallback
    would compile it, its inputs and its kernels."""

    def note(verdict: Verdict) -> None:
        report.in_context = "kept" if verdict.keep else "dropped"
        report.verdict = verdict.record()

    key = graph_key(code, inputs, report.replaced)
    judging = Judging(key, report.replaced, store, clock, report.graph, note)
    report.in_context = "judging" if judging.known is None else (
        "kept" if judging.known.get("keep", True) else "dropped"
    )  # fmt: skip
    report.verdict = judging.known
    return judging


def compile_beside(compile_graph: Callable[[], Any]) -> Any:
    """A second compile of one graph in one AOTAutograd call (the fallback's own graph, to judge
    the kernels' in context): Inductor reports each compile's output strides to AOTAutograd
    through the tracing context, which takes one report. The first stays; the second must match
    it, or the two graphs cannot stand in for each other."""
    context = torch._guards.TracingContext.try_get()
    strides: list[Any] | None = getattr(context, "output_strides", None)
    if strides is None:
        return compile_graph()
    first = list(strides)
    strides.clear()
    try:
        compiled = compile_graph()
        if strides != first:
            raise RuntimeError(f"output strides {list(strides)} against {first}")
    finally:
        strides[:] = first
    return compiled
