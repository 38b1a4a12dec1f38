"""Timing a whole step (a training step with its optimizer, or an inference call): median of
repeated runs, on the GPU with `triton.testing.do_bench` (CUDA events, L2 flushed between
runs), on the CPU with `time.perf_counter`; the statistics are runtime/timing.py's `summarize`.

Owns: the step timer (`step_timing`), the steady rate of steps run back to back (`steady_ms`),
the joules a step uses on the GPU (`step_energy`: profilers/energy.py's meter and loop) and
the first-call (compile + warm-up) clock.
Must not: compile or compare anything, or time kernels (runtime/timing.py's `time_kernel`
does, for the subgraphs of the roofline chart too): a step runs many kernels, Python and the
optimizer, so it is timed as the user runs it, without CUDA-graph replay.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import torch

from ..profilers.energy import EnergyMeter, EnergyReading, NvmlMeter, measure_loop
from ..runtime.timing import Timing, summarize

T = TypeVar("T")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_first_call(fn: Callable[[], T], device: torch.device) -> tuple[T, float]:
    """Run `fn` once (this is where torch.compile compiles) and return (result, seconds)."""
    synchronize(device)
    start = time.perf_counter()
    result = fn()
    synchronize(device)
    return result, time.perf_counter() - start


def step_timing(
    fn: Callable[[], object],
    device: torch.device,
    cpu_reps: int = 10,
    gpu_warmup_ms: int = 25,
    gpu_rep_ms: int = 100,
) -> Timing:
    """The times of repeated calls of `fn`, summarized (median, spread)."""
    if device.type == "cuda":
        from triton.testing import do_bench

        times = do_bench(fn, warmup=gpu_warmup_ms, rep=gpu_rep_ms, return_mode="all")
        return summarize([float(t) for t in times], "do_bench")
    if cpu_reps < 1:
        raise ValueError(f"cpu_reps={cpu_reps}: need at least one timed run")
    fn()  # one untimed run: allocator and caches settle after the first call
    cpu_times: list[float] = []
    for _ in range(cpu_reps):
        start = time.perf_counter()
        fn()
        cpu_times.append((time.perf_counter() - start) * 1e3)
    return summarize(cpu_times, "perf_counter")


def steady_ms(
    step: Callable[[], None], device: torch.device, step_ms: float, window_ms: float = 500.0
) -> float:
    """Wall ms per step of `step` run back to back, one synchronize at the end: at least 10
    steps and about `window_ms` (from `step_ms`, a first timing), after 3 untimed ones."""
    count = max(10, min(1000, int(window_ms / max(step_ms, 1e-3))))
    for _ in range(3):
        step()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(count):
        step()
    synchronize(device)
    return (time.perf_counter() - start) * 1e3 / count


def step_energy(
    step: Callable[[], None],
    device: torch.device,
    step_ms: float,
    meter: EnergyMeter | None = None,
) -> EnergyReading | None:
    """Joules per step of `step` run back to back (batches of about 5 ms of steps, each waited
    for), from the GPU's energy counter; None off CUDA or without NVML. `step_ms`: a first
    timing, to size the batches."""
    if device.type != "cuda":
        return None
    meter = meter or NvmlMeter.open(device.index or 0)
    if meter is None:
        return None
    batch = max(1, int(5.0 / max(step_ms, 1e-3)))

    def run() -> int:
        for _ in range(batch):
            step()
        synchronize(device)
        return batch

    run()  # the GPU busy and its clocks up before the counter is read
    return measure_loop(run, meter)
