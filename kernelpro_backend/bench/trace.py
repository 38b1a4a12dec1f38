"""What differs between two modes' training steps, kernel by kernel: a few steps of a bench
workload profiled under each mode (torch.profiler, CUDA activity), per kernel name the calls
and total GPU time per step in each mode, largest differences first, plus each mode's wall time
per profiled step. For gaps the bench cannot explain (MoE: kernelpro's fallback 0.89x Inductor
with do_bench, 1.00x by wall clock).

    OUT=/tmp/out python -m kernelpro_backend.cli.sweeps trace --workload moe [--modes inductor,kernelpro]

Owns: `trace_modes` (profiling, per-kernel table, chrome traces) and its console table.
Must not: time steps its own way (bench/timing.py's clock wraps the profiled steps).
"""

from __future__ import annotations

import json
import os
import types
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from .modes import make_modes
from .runner import prepare_mode
from .timing import time_first_call
from .workloads import WORKLOADS


def trace_modes(
    workload_name: str, mode_names: list[str], steps: int, device: torch.device, out: Path
) -> dict[str, Any]:
    """Profile `steps` steps of the workload under each mode; chrome traces go under `out`."""
    cuda = device.type == "cuda"
    workload = WORKLOADS[workload_name](device, None, "full" if cuda else "tiny")
    modes = [m for m in make_modes(mode_names) if m.name in mode_names]
    per_kernel: dict[str, dict[str, list[float]]] = defaultdict(dict)
    wall_ms: dict[str, float] = {}
    for mode in modes:
        step = prepare_mode(workload, mode)[2]  # the bench's own step, compiled by its first call
        for _ in range(3):
            step()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])

        def profiled_steps(run: Callable[[], None] = step) -> None:
            for _ in range(steps):
                run()

        with profile(activities=activities) as prof:
            _, seconds = time_first_call(profiled_steps, device)
        wall_ms[mode.name] = seconds / steps * 1e3
        prof.export_chrome_trace(str(out / f"trace_{workload_name}_{mode.name}.json"))
        for event in prof.key_averages():
            gpu_us = getattr(event, "self_device_time_total", 0) or 0
            if cuda and gpu_us <= 0:
                continue
            total = gpu_us if cuda else event.self_cpu_time_total
            per_kernel[event.key][mode.name] = [event.count / steps, total / steps]
        del step
    return {"modes": [m.name for m in modes], "wall_ms_per_step": wall_ms, "per_kernel": per_kernel}


def format_table(result: dict[str, Any], cuda: bool, limit: int = 40) -> str:
    modes, per_kernel = result["modes"], result["per_kernel"]
    rows = []
    for kernel, by_mode in per_kernel.items():
        times = [by_mode.get(m, [0, 0])[1] for m in modes]
        rows.append((max(times) - min(times), kernel, by_mode))
    rows.sort(key=lambda r: -r[0])
    unit = "GPU us/step" if cuda else "CPU us/step"
    header = "".join(f"{m + ' calls':>18}{m + ' ' + unit:>28}" for m in modes)
    lines = [f"{'kernel':<60}{header}"]
    for _, kernel, by_mode in rows[:limit]:
        cells = "".join(
            f"{by_mode.get(m, [0, 0])[0]:>18.1f}{by_mode.get(m, [0, 0])[1]:>28.1f}" for m in modes
        )
        lines.append(f"{kernel[:59]:<60}{cells}")
    wall = {k: round(v, 3) for k, v in result["wall_ms_per_step"].items()}
    lines.append(f"wall ms per profiled step: {wall}")
    return "\n".join(lines)


def run_trace(
    workload: str, modes: str = "inductor,kernelpro", steps: int = 5, device: str = "cuda"
) -> int:
    """Trace `modes` of `workload` (cli/sweeps.py parses its arguments), write
    $OUT/trace_<workload>.json and print the table; returns the exit code."""
    args = types.SimpleNamespace(workload=workload, modes=modes, steps=steps, device=device)
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    on = torch.device(args.device)
    names = [m.strip() for m in args.modes.split(",")]
    result = trace_modes(args.workload, names, args.steps, on, out)
    (out / f"trace_{args.workload}.json").write_text(json.dumps(result, indent=1))
    print(format_table(result, on.type == "cuda"))
    return 0
