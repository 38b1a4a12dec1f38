"""Timing a step: median of repeated runs, on the GPU with `triton.testing.do_bench` (CUDA
events, L2 flushed between runs), on the CPU with `time.perf_counter`.

Owns: the two timers and the first-call (compile + warm-up) clock.
Must not: compile or compare anything.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TypeVar

import torch

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


def median_ms(
    fn: Callable[[], object],
    device: torch.device,
    cpu_reps: int = 10,
    gpu_warmup_ms: int = 25,
    gpu_rep_ms: int = 100,
) -> float:
    """Median time of one call of `fn` in milliseconds."""
    if device.type == "cuda":
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=gpu_warmup_ms, rep=gpu_rep_ms, return_mode="median"))
    if cpu_reps < 1:
        raise ValueError(f"cpu_reps={cpu_reps}: need at least one timed run")
    fn()  # one untimed run: allocator and caches settle after the first call
    times: list[float] = []
    for _ in range(cpu_reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)
