"""Timing a validated kernel, and deciding which of two timings is faster.

Owns: `Timing`, `time_kernel` (CUDA: median of event timings with an L2 flush before every
call and input sets rotated, after warm-up; kernels under LAUNCH_BOUND_MS are timed by
replaying a CUDA graph of many calls, sized and given up on by the replays' own times; CPU:
time.perf_counter; with `settle`, stopped early once the median is `settled`; with `heat_s`,
after that long of untimed runs), `faster`,
`launch_timing` (how long the host takes to launch a call against the call's end) and
`host_bound` (the rule the warm-up's check and the bench both read it by), `OffStreamWork` (a
kernel whose calls leave work on a stream the timed one does not wait for).
Must not: check results (validate.py does) or decide what is worth timing.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

# Below this, host overhead (Python, dynamo guards, launch) can rival the GPU time, and it differs
# between candidates (a Triton launcher, a torch.compile'd Inductor call with its guards, eager
# aten): time CUDA-graph replays instead, so every candidate and baseline is compared on GPU time.
# Seen on H100: Inductor baselines of 3-10 us pointwise subgraphs measured 40-90 us with events
# (guards + Python per call) while Triton candidates under 20 us were graph-timed: 10x unfair.
LAUNCH_BOUND_MS = 1.0
GRAPH_TARGET_MS = 0.5  # calls captured per graph: enough for about 0.5 ms per replay
MIN_REPS, MAX_REPS = 10, 500
# Run-to-run drift (clocks, temperature) that one run's own spread does not show: the reported
# spread is at least this fraction of the median.
SPREAD_FLOOR = 0.015
# With `settle`, timed runs go in batches of SETTLE_BATCH and stop before the budget once the
# median is settled (`settled`): at least SETTLE_MIN_REPS runs, the median's 95% confidence
# interval within SETTLE_FRACTION of it either side, and the two halves' medians as close (no
# drift). SETTLE_FRACTION is a quarter of the spread floor that `faster` adds to any median.
SETTLE_BATCH, SETTLE_MIN_REPS = 10, 20
SETTLE_FRACTION = SPREAD_FLOOR / 4
# A settled timing that starts on an idle GPU stops after a few milliseconds at boost clocks:
# on the H200, cuBLAS bf16 GEMMs of 0.1-1.5 ms read 10-13% under the full budget's median and
# under the same timing after a second of load (BENCHMARKS.md, "Settled timing reads boost
# clocks"). `heat_s` runs the kernel untimed for that long first (time_kernel; Options.
# timing_heat_s, 0 by default until its length is measured on the GPU).


# After a kernel's 5 warm-up calls finish on the stream they were called on (the host waits for
# their last event), the host's clock times a device-wide synchronize: work left on another
# stream, never joined back, is still running then (the caller would read outputs before they
# are written). A tail over OFF_STREAM_FACTOR x the events' span + OFF_STREAM_SLACK_MS is
# rejected before anything is timed. On one stream the tail is the synchronize's latency
# (microseconds); the host's own launch time and stalls fall before it, so they cannot trip it
# (timing the whole loop by the host clock did: 7.0 ms against 0.051 on a loaded H100).
OFF_STREAM_FACTOR, OFF_STREAM_SLACK_MS = 2.0, 5.0


class OffStreamWork(RuntimeError):
    """The calls took far longer on the device than on the stream they were timed on."""


@dataclasses.dataclass(frozen=True)
class Timing:
    median_ms: float
    spread_ms: float  # max((p80 - p20) / 2, SPREAD_FLOOR * median)
    times_ms: tuple[float, ...]
    method: str  # "events" | "cuda_graph" | "perf_counter"


class Timed(Protocol):
    median_ms: float | None
    spread_ms: float | None


def faster(a: Timed, b: Timed) -> bool | None:
    """True if `a` is faster than `b` beyond both spreads, False if slower, None for a tie
    (or when either was not timed)."""
    if a.median_ms is None or b.median_ms is None:
        return None
    noise = (a.spread_ms or 0.0) + (b.spread_ms or 0.0)
    if abs(a.median_ms - b.median_ms) <= noise:
        return None
    return a.median_ms < b.median_ms


def summarize(times_ms: Sequence[float], method: str) -> Timing:
    ordered = sorted(times_ms)
    median = statistics.median(ordered)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(p * (len(ordered) - 1))))]

    spread = max((pct(0.8) - pct(0.2)) / 2, SPREAD_FLOOR * median)
    return Timing(median, spread, tuple(times_ms), method)


def settled(times_ms: Sequence[float]) -> bool:
    """Whether more runs would hardly move the median: the 95% confidence interval of the
    median by order statistics (no assumption on the distribution: ranks n/2 -+ 0.98 sqrt(n))
    lies within SETTLE_FRACTION of it on either side, and the medians of the first and second
    halves of the runs, in order, differ by no more (clocks or temperature still moving)."""
    n = len(times_ms)
    if n < SETTLE_MIN_REPS:
        return False
    ordered = sorted(times_ms)
    median = statistics.median(ordered)
    reach = 0.98 * math.sqrt(n)
    low = ordered[max(0, math.floor(n / 2 - reach))]
    high = ordered[min(n - 1, math.ceil(n / 2 + reach))]
    allowed = SETTLE_FRACTION * median
    if median - low > allowed or high - median > allowed:
        return False
    first, second = times_ms[: n // 2], times_ms[n // 2 :]
    return abs(statistics.median(first) - statistics.median(second)) <= allowed


def _batches(reps: int, settle: bool) -> list[int]:
    """Sizes of the batches `reps` timed runs are taken in: one batch, or SETTLE_BATCH runs at
    a time when the timing may stop once `settled`."""
    if not settle:
        return [reps]
    return [min(SETTLE_BATCH, reps - start) for start in range(0, reps, SETTLE_BATCH)]


def _runs(
    reps: int, settle: bool, batch: Callable[[int, int], list[float]], heat_s: float = 0.0
) -> list[float]:
    """`reps` timed runs, `batch(first, n)` timing runs first..first+n-1; with `settle` in
    batches, stopping once the runs so far are `settled`. First, batches whose times are
    dropped for `heat_s` seconds (each batch waits for its runs: the GPU is kept busy)."""
    if heat_s > 0:
        end = time.perf_counter() + heat_s
        while time.perf_counter() < end:
            batch(0, SETTLE_BATCH)
    times: list[float] = []
    for n in _batches(reps, settle):
        times += batch(len(times), n)
        if settle and settled(times):
            break
    return times


def _reps(estimate_ms: float, budget_s: float) -> int:
    return max(MIN_REPS, min(MAX_REPS, int(budget_s * 1e3 / max(estimate_ms, 1e-6))))


def time_kernel(
    fn: Callable[..., Any],
    input_sets: Sequence[Sequence[torch.Tensor]],
    device: torch.device,
    budget_s: float = 0.25,
    l2_bytes: int = 50 * 2**20,
    abandon_above_ms: float | None = None,
    settle: bool = False,
    heat_s: float = 0.0,
) -> Timing:
    """`abandon_above_ms`: a kernel whose warm-up runs already take longer than this is not
    timed further; its Timing is those runs, method "<method>-abandoned" (a search passes a
    multiple of its best time, so a clearly slower candidate costs a few runs, not a budget);
    a kernel under LAUNCH_BOUND_MS is judged by its first CUDA-graph replays instead, method
    "cuda_graph-abandoned". `settle`: the timed runs stop before `budget_s` once their median
    is `settled`. `heat_s`: seconds of untimed runs before the timed ones (not counted in
    `budget_s`)."""
    with torch.no_grad():
        if device.type == "cuda":
            return _time_cuda(
                fn, input_sets, device, budget_s, l2_bytes, abandon_above_ms, settle, heat_s
            )
        return _time_cpu(fn, input_sets, budget_s, abandon_above_ms, settle, heat_s)


def _time_cpu(
    fn: Callable[..., Any],
    sets: Sequence[Sequence[torch.Tensor]],
    budget_s: float,
    abandon_above_ms: float | None = None,
    settle: bool = False,
    heat_s: float = 0.0,
) -> Timing:
    for k in range(2):
        fn(*sets[k % len(sets)])
    start = time.perf_counter()
    fn(*sets[0])
    estimate_ms = (time.perf_counter() - start) * 1e3
    if abandon_above_ms is not None and estimate_ms > abandon_above_ms:
        return summarize([estimate_ms], "perf_counter-abandoned")

    def batch(first: int, n: int) -> list[float]:
        times = []
        for k in range(first, first + n):
            args = sets[k % len(sets)]
            start = time.perf_counter()
            fn(*args)
            times.append((time.perf_counter() - start) * 1e3)
        return times

    return summarize(_runs(_reps(estimate_ms, budget_s), settle, batch, heat_s), "perf_counter")


def _events(n: int) -> list[torch.cuda.Event]:
    return [torch.cuda.Event(enable_timing=True) for _ in range(n)]


def _time_cuda(
    fn: Callable[..., Any],
    sets: Sequence[Sequence[torch.Tensor]],
    device: torch.device,
    budget_s: float,
    l2_bytes: int,
    abandon_above_ms: float | None = None,
    settle: bool = False,
    heat_s: float = 0.0,
) -> Timing:
    flush = torch.empty(2 * l2_bytes // 4, dtype=torch.int32, device=device)
    for k in range(3):
        fn(*sets[k % len(sets)])
    torch.cuda.synchronize(device)
    starts, ends = _events(5), _events(5)
    for k in range(5):
        starts[k].record()
        fn(*sets[k % len(sets)])
        ends[k].record()
    ends[-1].synchronize()  # the caller's stream is done
    began = time.perf_counter()
    torch.cuda.synchronize(device)  # every stream: work the events do not wait for shows here
    _check_one_stream((time.perf_counter() - began) * 1e3, starts[0].elapsed_time(ends[-1]))
    warm = [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]
    estimate_ms = statistics.median(warm)
    if estimate_ms < LAUNCH_BOUND_MS:
        # These warm-up events bracket the host's launch as well (the GPU is idle between
        # calls): for a short kernel they measure the launch, not the kernel (on H100, 7 us
        # GEMMs read 40-100 us), so the graph's replays decide whether to give up on it.
        try:
            return _time_cuda_graph(
                fn, sets, device, budget_s, estimate_ms, flush, abandon_above_ms, settle, heat_s
            )
        except Exception:  # not capturable (host sync, allocation pattern): time it with events
            torch.cuda.synchronize(device)
    elif abandon_above_ms is not None and estimate_ms > abandon_above_ms:
        return summarize(warm, "events-abandoned")

    def batch(first: int, n: int) -> list[float]:
        starts, ends = _events(n), _events(n)
        for k in range(n):
            flush.zero_()
            starts[k].record()
            fn(*sets[(first + k) % len(sets)])
            ends[k].record()
        torch.cuda.synchronize(device)
        return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]

    reps = _reps(estimate_ms + 0.05, budget_s)  # + the flush, about 35 us for 100 MB
    return summarize(_runs(reps, settle, batch, heat_s), "events")


def _check_one_stream(tail_ms: float, span_ms: float) -> None:
    """Raise OffStreamWork when calls whose events spanned `span_ms` left the device busy for
    `tail_ms` more (host clock, from their stream's end to a device-wide synchronize) beyond
    the allowed gap."""
    if tail_ms > OFF_STREAM_FACTOR * span_ms + OFF_STREAM_SLACK_MS:
        raise OffStreamWork(
            f"5 calls spanned {span_ms:.3f} ms on the stream they were called on, and the "
            f"device stayed busy {tail_ms:.3f} ms after it: the kernel leaves work on another "
            "stream that the caller's stream does not wait for (its outputs would be read "
            "before they are written)"
        )


def _time_cuda_graph(
    fn: Callable[..., Any],
    sets: Sequence[Sequence[torch.Tensor]],
    device: torch.device,
    budget_s: float,
    estimate_ms: float,
    flush: torch.Tensor,
    abandon_above_ms: float | None = None,
    settle: bool = False,
    heat_s: float = 0.0,
) -> Timing:
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):  # warm-up on a side stream, as capture requires
        for k in range(3):
            fn(*sets[k % len(sets)])
    torch.cuda.current_stream(device).wait_stream(side)
    calls = _calls(estimate_ms)
    graph = _capture(fn, sets, calls)
    per_call_ms = statistics.median(_replays(graph, 3, calls, flush))
    if _calls(per_call_ms) > 2 * calls:
        # The estimate was the host's launch, not the kernel: a graph of so few calls is
        # mostly its own launch. Captured again at the size the kernel's time asks for.
        del graph
        estimate_ms, calls = per_call_ms, _calls(per_call_ms)
        graph = _capture(fn, sets, calls)
    if abandon_above_ms is not None:
        first = _replays(graph, 3, calls, flush)
        if statistics.median(first) > abandon_above_ms:
            return summarize(first, "cuda_graph-abandoned")

    def batch(first: int, n: int) -> list[float]:
        return _replays(graph, n, calls, flush)

    reps = _reps(estimate_ms * calls + 0.05, budget_s)
    return summarize(_runs(reps, settle, batch, heat_s), "cuda_graph")  # the graph goes on return


def _calls(per_call_ms: float) -> int:
    """Calls captured in one graph: about GRAPH_TARGET_MS a replay, 1 to 200."""
    return max(1, min(200, math.ceil(GRAPH_TARGET_MS / max(per_call_ms, 1e-4))))


def _capture(
    fn: Callable[..., Any], sets: Sequence[Sequence[torch.Tensor]], calls: int
) -> torch.cuda.CUDAGraph:
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for k in range(calls):
            fn(*sets[k % len(sets)])
    graph.replay()
    return graph


def _replays(
    graph: torch.cuda.CUDAGraph, reps: int, calls: int, flush: torch.Tensor
) -> list[float]:
    """Ms per call of `reps` replays of `graph` (`calls` calls each), the L2 flushed before
    each replay."""
    starts, ends = _events(reps), _events(reps)
    for k in range(reps):
        flush.zero_()
        starts[k].record()
        graph.replay()
        ends[k].record()
    torch.cuda.synchronize(flush.device)
    return [s.elapsed_time(e) / calls for s, e in zip(starts, ends, strict=True)]


def launch_timing(
    fn: Callable[[], object], device: torch.device, reps: int = 5
) -> tuple[float, float]:
    """(ms to launch one call of `fn`, ms until it finished): medians of `reps` calls, each
    started with the device idle. Launches taking most of the call: the host sets its time."""
    launch, total = [], []
    for _ in range(reps):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        launched = time.perf_counter()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        launch.append((launched - start) * 1e3)
        total.append((time.perf_counter() - start) * 1e3)
    return statistics.median(launch), statistics.median(total)


# A step whose launches take this share of its time or more waits on the host: the GPU runs
# dry between launches (a GPT-2-small step on one H100 under kernelpro: 23.7 of 24.3 ms; under
# Inductor, GPU-bound, 25.1 of 30.0; BENCHMARKS.md, "One H100 alone").
HOST_BOUND_SHARE = 0.9


def host_bound(launch_ms: float, step_ms: float) -> bool:
    """Whether a call whose launches take `launch_ms` of its `step_ms` (`launch_timing`) is
    set by the host."""
    return step_ms > 0 and launch_ms >= HOST_BOUND_SHARE * step_ms
