"""GPU: what differs between two modes' training steps, kernel by kernel. Profiles a few steps
of a bench workload under each mode (torch.profiler, CUDA activity) and prints, per kernel
name, the calls and total GPU time in each mode, largest differences first, plus each mode's
CPU time per step. For gaps the bench cannot explain (MoE: kernelpro's fallback 0.89x Inductor
with do_bench, 1.00x by wall clock).

    OUT=/tmp/out python3 scripts/gpu_trace_modes.py --workload moe [--modes inductor,kernelpro]
Writes $OUT/trace_<workload>.json (and a chrome trace per mode) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from kernelpro_backend.bench.modes import make_modes
from kernelpro_backend.bench.runner import prepare_mode
from kernelpro_backend.bench.workloads import WORKLOADS


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", required=True)
    ap.add_argument("--modes", default="inductor,kernelpro")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--device", default="cuda", help="cpu: smoke-test at tiny size")
    args = ap.parse_args()
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    workload = WORKLOADS[args.workload](device, None, "full" if cuda else "tiny")
    names = [m.strip() for m in args.modes.split(",")]
    modes = [m for m in make_modes(names) if m.name in names]
    per_kernel: dict[str, dict[str, list[float]]] = defaultdict(dict)
    cpu_ms: dict[str, float] = {}
    for mode in modes:
        step = prepare_mode(workload, mode)[2]  # the bench's own step, compiled by its first call
        for _ in range(3):
            step()
        if cuda:
            torch.cuda.synchronize()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        start = time.perf_counter()
        with profile(activities=activities) as prof:
            for _ in range(args.steps):
                step()
            if cuda:
                torch.cuda.synchronize()
        cpu_ms[mode.name] = (time.perf_counter() - start) / args.steps * 1e3
        prof.export_chrome_trace(str(out / f"trace_{args.workload}_{mode.name}.json"))
        for event in prof.key_averages():
            gpu_us = getattr(event, "self_device_time_total", 0) or 0
            if cuda and gpu_us <= 0:
                continue
            total = gpu_us if cuda else event.self_cpu_time_total
            per_kernel[event.key][mode.name] = [event.count / args.steps, total / args.steps]
        del step
    rows = []
    for kernel, by_mode in per_kernel.items():
        times = [by_mode.get(m.name, [0, 0])[1] for m in modes]
        rows.append((max(times) - min(times), kernel, by_mode))
    rows.sort(key=lambda r: -r[0])
    (out / f"trace_{args.workload}.json").write_text(
        json.dumps({"wall_ms_per_step": cpu_ms, "per_kernel": per_kernel}, indent=1)
    )
    unit = "GPU us/step" if cuda else "CPU us/step"
    header = "".join(f"{m.name + ' calls':>18}{m.name + ' ' + unit:>28}" for m in modes)
    print(f"{'kernel':<60}{header}")
    for _, kernel, by_mode in rows[:40]:
        cells = "".join(
            f"{by_mode.get(m.name, [0, 0])[0]:>18.1f}{by_mode.get(m.name, [0, 0])[1]:>28.1f}"
            for m in modes
        )
        print(f"{kernel[:59]:<60}{cells}")
    print("wall ms per profiled step:", {k: round(v, 3) for k, v in cpu_ms.items()})


if __name__ == "__main__":
    main()
