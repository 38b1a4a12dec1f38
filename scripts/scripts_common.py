"""What the one-off GPU scripts share: timing a training step and its peak memory."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def measure_step(step: Callable[[], torch.Tensor], repeats: int = 20, warm: int = 3) -> str:
    """'median ms (min, max), peak MiB above what was allocated before, loss' of `step`."""
    for _ in range(warm):
        loss = step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    step()
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - before) / 2**20
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return (
        f"median {times[len(times) // 2]:.3f} ms (min {times[0]:.3f}, max {times[-1]:.3f}), "
        f"peak {peak:.0f} MiB, loss {float(loss):.5f}"
    )
