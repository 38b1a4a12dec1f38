"""Is a bench workload's training step host-bound? Per mode (Inductor, kernelpro, kernelpro
compiled with cuDNN attention off, without the LM-head rewrite, without the attention rewrite,
without either), interleaved rounds of steps: the step's time and the
host's time inside it (the call returning before the GPU finishes); each mode's Python under
cProfile (20 steps); then one profiled step per
mode through `kernelpro_backend/bench/trace_gaps.py` (GPU busy, idle between kernels, the longest gaps, and the
host ops by self time). Traces go under $OUT, gzipped.

    OUT=/tmp/out PYTHONPATH=.:docs/gpu_runs/common python docs/gpu_runs/2026-11-26-host-path/gpu_host_bound.py [--workload mini_gpt]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time

import torch
from scripts_common import mode_step

from kernelpro_backend.bench.trace_gaps import gaps
from kernelpro_backend.bench.workloads import WORKLOADS


def steps_of(name: str) -> dict:  # type: ignore[type-arg]
    workload = WORKLOADS[name](torch.device("cuda"), None, "full")
    steps = {k: mode_step(workload, k) for k in ("inductor", "kernelpro")}
    torch.backends.cuda.enable_cudnn_sdp(False)  # the attention backend is picked at trace time
    torch._dynamo.reset()
    steps["kernelpro-flash"] = mode_step(workload, "kernelpro")
    torch.backends.cuda.enable_cudnn_sdp(True)
    torch._dynamo.reset()
    no_op = {"rewrite_linear_cross_entropy": False}
    steps["kernelpro-no-lm-op"] = mode_step(workload, "kernelpro", no_op)
    torch._dynamo.reset()
    no_att = {"rewrite_attention": False}
    steps["kernelpro-no-attn"] = mode_step(workload, "kernelpro", no_att)
    torch._dynamo.reset()
    steps["kernelpro-no-rewrite"] = mode_step(workload, "kernelpro", {**no_op, **no_att})
    return steps


def python_hotspots(name: str, step, count: int = 20) -> None:  # type: ignore[no-untyped-def]
    """cProfile of `count` steps: the functions with the most time of their own."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(count):
        step()
    torch.cuda.synchronize()
    prof.disable()
    print(f"== {name}: cProfile of {count} steps, by own time")
    pstats.Stats(prof).sort_stats("tottime").print_stats(12)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="mini_gpt")
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    steps = steps_of(a.workload)
    for step in steps.values():
        for _ in range(3):
            step()
    times: dict[str, dict[str, list[float]]] = {k: {"step": [], "host": []} for k in steps}
    for _ in range(a.rounds):
        for k, step in steps.items():
            for _ in range(10):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                step()
                t1 = time.perf_counter()
                torch.cuda.synchronize()
                times[k]["host"].append((t1 - t0) * 1e3)
                times[k]["step"].append((time.perf_counter() - t0) * 1e3)
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    for k, v in times.items():
        print(f"{a.workload} {k:16s} step {med(v['step']):.3f} ms (min {min(v['step']):.3f}) "
              f"host {med(v['host']):.3f} ms", flush=True)  # fmt: skip
    for k, step in steps.items():
        python_hotspots(k, step)
    out = os.environ.get("OUT", ".")
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    for k, step in steps.items():
        with torch.profiler.profile(activities=activities) as prof:
            step()
            torch.cuda.synchronize()
        path = f"{out}/trace-{a.workload}-{k}.json"
        prof.export_chrome_trace(path)
        rows, summary = gaps(path, 5.0)
        print(k, json.dumps(summary))
        for row in sorted(rows, key=lambda r: -r["idle_us"])[:6]:
            print("   ", json.dumps(row))
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14))
        subprocess.run(["gzip", "-f", path], check=False)


if __name__ == "__main__":
    main()
