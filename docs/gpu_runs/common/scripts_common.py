"""What the recorded GPU probes under docs/gpu_runs/ share (put docs/gpu_runs/common on
PYTHONPATH): a workload's step compiled under a bench mode, timing a training step and its peak
memory, timing a kernel call, and the GEMM epilogues the CUTLASS drivers use."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from kernelpro_backend.bench.modes import make_modes
from kernelpro_backend.bench.runner import prepare_mode
from kernelpro_backend.bench.workload import Workload
from kernelpro_backend.runtime.timing import time_kernel

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "identity": lambda y: y,
    "gelu": F.gelu,
    "gelu_tanh": lambda y: F.gelu(y, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
    "swish2": lambda y: y * torch.sigmoid(y) * 2.0,  # no CUTLASS activation: a functor
}


def mode_step(
    workload: Workload, mode: str, kernelpro_options: dict | None = None
) -> Callable[[], None]:
    """`workload`'s step compiled (and run once) under the bench mode named `mode`, kernelpro
    with `kernelpro_options` if given."""
    (found,) = [m for m in make_modes([mode], kernelpro_options) if m.name == mode]
    return prepare_mode(workload, found)[2]


def median_ms(fn: Callable[[], object]) -> float:
    """`fn`'s median GPU time, as the search's evaluator times a candidate (runtime.timing)."""
    return time_kernel(lambda: fn(), [()], torch.device("cuda")).median_ms


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
