"""Whether a training step is host-bound: Inductor's and kernelpro's step of a bench workload,
each timed by CUDA events per step (interleaved, 6 x 5 steps), by the host's launch time per
step (no synchronize) against launch + synchronize, with Python's GC off, and profiled for two
steps (synchronizing calls, the top host costs; Chrome traces under $OUT).

A step whose host launch time is about its launch + synchronize time is host-bound: its GPU
work waits on launches, so a GPU-side gain shows only as far as the host allows and the step's
time moves with the host's jitter (BENCHMARKS.md, "One H100 alone").

    PYTHONPATH=.:scripts python scripts/gpu_step_host_probe.py gpt2_small
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from kernelpro_backend.bench.modes import make_modes
from kernelpro_backend.bench.runner import prepare_mode
from kernelpro_backend.bench.workloads import WORKLOADS

SYNCING = (
    "Synchronize",
    "Memcpy",
    "cudaFree",
    "cudaMalloc",
    "cudaHostAlloc",
    "item",
    "_local_scalar",
)


def gpu_times(step, reps: int) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return out


def host_times(step, reps: int) -> tuple[list[float], list[float]]:  # type: ignore[no-untyped-def]
    launch, total = [], []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        launch.append((t1 - t0) * 1e3)
        total.append((time.perf_counter() - t0) * 1e3)
    return launch, total


def describe(name: str, times: list[float]) -> str:
    v = sorted(times)
    return f"{name:10s} min {v[0]:.2f} med {statistics.median(v):.2f} max {v[-1]:.2f}"


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "gpt2_small"
    workload = WORKLOADS[name](torch.device("cuda"), None, "full")
    modes = {m.name: m for m in make_modes(["inductor", "kernelpro"])}
    steps = {}
    for mode in ("inductor", "kernelpro"):
        _, compile_s, step = prepare_mode(workload, modes[mode])
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        steps[mode] = step
        print(mode, "compiled", round(compile_s, 1), "s", flush=True)
    events: dict[str, list[float]] = {mode: [] for mode in steps}
    for _ in range(6):
        for mode, step in steps.items():
            events[mode] += gpu_times(step, 5)
    for mode, times in events.items():
        print(describe(mode, times), "(GPU events, ms)")
    for mode, step in steps.items():
        launch, total = host_times(step, 10)
        print(
            f"{mode:10s} host launch ms med {statistics.median(launch):.2f}; "
            f"launch + synchronize med {statistics.median(total):.2f}"
        )
    gc.disable()
    for mode, step in steps.items():
        print(describe(mode, gpu_times(step, 20)), "(GPU events, GC off)")
    gc.enable()
    for mode, step in steps.items():
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            step()
            step()
            torch.cuda.synchronize()
        averages = prof.key_averages()
        syncing = [
            (e.key, e.count, round(e.cpu_time_total / 1e3, 2))
            for e in averages
            if any(k in e.key for k in SYNCING)
        ]
        print(mode, "synchronizing:", syncing)
        top = sorted(averages, key=lambda e: -e.self_cpu_time_total)[:12]
        print(
            mode,
            "top host:",
            [(e.key[:60], e.count, round(e.self_cpu_time_total / 1e3, 2)) for e in top],
        )
        prof.export_chrome_trace(f"{os.environ.get('OUT', '/tmp')}/trace-{name}-{mode}.json")


if __name__ == "__main__":
    main()
