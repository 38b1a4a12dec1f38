"""The bench's `lm_head` training step (8192 x 1024 -> 32000 bf16, AdamW) as the bench runs it:
steps queued back to back (`triton.testing.do_bench`, no synchronisation between them), Inductor
against kernelpro. Where a pipelined step loses time: the host's time to issue one step (while
the GPU is behind), the GPU's busy time per step, and the idle gaps between kernels of a
profiled run of queued steps (`trace_gaps.py`), for each mode. `--aligned` adds kernelpro with
the LM-head op's chunks made equal and a multiple of 128 rows.

`--workload` runs another bench workload with the LM-head op (mini_gpt, gpt2_small) the same way;
`--no-profile` leaves out the profiled run.

PYTHONPATH=.:docs/gpu_runs/common python docs/gpu_runs/2026-11-26-host-path/gpu_lm_head_pipeline.py [--aligned] [--rounds 3]
    [--workload lm_head] [--no-profile]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable

import torch
from triton.testing import do_bench

import kernelpro_backend.ops.linear_ce as op
from kernelpro_backend.bench import modes, runner, workloads
from kernelpro_backend.bench.trace_gaps import gaps


def aligned_chunk_rows(rows: int, vocab: int) -> int:
    """As op.chunk_rows, then the chunks made equal and rounded up to 128 rows."""
    most = max(1, min(rows, op.CHUNK_ELEMENTS // max(vocab, 1)))
    chunks = -(-rows // most)
    each = -(-rows // chunks)
    return min(rows, -(-each // 128) * 128)


def with_chunks(rows_fn: Callable[[int, int], int], step: Callable[[], None]) -> Callable[[], None]:
    original = op.chunk_rows

    def run() -> None:
        op.chunk_rows = rows_fn
        try:
            step()
        finally:
            op.chunk_rows = original

    return run


ALLOCATOR = ("num_alloc_retries", "num_device_alloc", "num_device_free", "num_sync_all_streams")


def issue_and_wall(step: Callable[[], None], n: int = 10) -> tuple[float, float]:
    """(host ms to issue one step while the GPU is behind, wall ms per step queued back to back);
    prints what the caching allocator did meanwhile (a retry or a device free synchronises)."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    after = torch.cuda.memory_stats()
    print("    allocator over the queued steps:",
          {k: after.get(k, 0) - before.get(k, 0) for k in ALLOCATOR})  # fmt: skip
    return (t1 - t0) * 1e3 / n, (t2 - t0) * 1e3 / n


def profile_queued(step: Callable[[], None], label: str, out: str, n: int = 6) -> dict:
    """GPU busy and idle of `n` queued steps under the profiler (per step: divide by n)."""
    cache = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(n):
            cache.zero_()  # as do_bench flushes L2 between runs
            step()
        torch.cuda.synchronize()
    path = os.path.join(out, f"trace-pipeline-{label}.json")
    prof.export_chrome_trace(path)
    found, summary = gaps(path, 5.0)
    with open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    by_name: dict[str, float] = {}
    for k in kernels:
        by_name[k["name"][:60]] = by_name.get(k["name"][:60], 0.0) + k["dur"] / n
    top = sorted(found, key=lambda g: -g["idle_us"])[:8]
    return {"label": label, "summary": summary, "per_step_kernels_us": by_name, "top_gaps": top}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--aligned", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workload", default="lm_head")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--profile-steps", type=int, default=6)
    args = parser.parse_args()
    out = os.environ.get("OUT", ".")
    device = torch.device("cuda")
    work = workloads.WORKLOADS[args.workload](device, None, "full")
    steps: dict[str, Callable[[], None]] = {}
    for mode in modes.make_modes([modes.INDUCTOR, modes.KERNELPRO]):
        _, _, steps[mode.name] = runner.prepare_mode(work, mode)
    if args.aligned:
        steps["kernelpro-aligned"] = with_chunks(aligned_chunk_rows, steps[modes.KERNELPRO])
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            times[name].append(do_bench(step, warmup=25, rep=200, return_mode="median"))
    results = []
    for name, step in steps.items():
        issue, wall = issue_and_wall(step)
        if args.no_profile:
            print(f"{args.workload} {name:<18} do_bench "
                  f"{' / '.join(f'{t:.3f}' for t in times[name])} ms; host issues a step in "
                  f"{issue:.3f} ms, queued wall {wall:.3f} ms/step")  # fmt: skip
            results.append({"mode": name, "do_bench_ms": times[name], "issue_ms": issue,
                            "queued_wall_ms": wall})  # fmt: skip
            continue
        prof = profile_queued(step, name, out, args.profile_steps)
        per = {
            k: round(v / args.profile_steps, 1)
            for k, v in prof["summary"].items()
            if k.endswith("_us") and v
        }
        results.append({"mode": name, "do_bench_ms": times[name], "issue_ms": issue,
                        "queued_wall_ms": wall, **prof})  # fmt: skip
        print(
            f"{name:<18} do_bench {' / '.join(f'{t:.3f}' for t in times[name])} ms; host issues "
            f"a step in {issue:.3f} ms, queued wall {wall:.3f} ms/step; profile {prof['summary']}"
            f" (per step {per})"
        )
        for g in prof["top_gaps"][:5]:
            print(f"    gap {g}")
        kern = sorted(prof["per_step_kernels_us"].items(), key=lambda kv: -kv[1])[:10]
        for k, us in kern:
            print(f"    {us:8.1f} us/step  {k}")
    with open(os.path.join(out, f"{args.workload}-pipeline.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)


if __name__ == "__main__":
    main()
