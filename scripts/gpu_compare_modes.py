"""GPU: step time of bench workloads under Inductor and kernelpro (cache-only on an empty
cache: its fallback plus its own overhead), with the modes' rounds interleaved so that clock
and thermal drift hit both alike. Settles whether a gap seen in `gpu_bench.py`'s one
sequential measurement per mode is kernelpro's cost or noise.

    OUT=/tmp/out python3 scripts/gpu_compare_modes.py --workload convnet --workload moe
Writes $OUT/compare_modes.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

from kernelpro_backend.bench.modes import make_modes
from kernelpro_backend.bench.runner import prepare_mode
from kernelpro_backend.bench.workloads import WORKLOADS


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", action="append", required=True)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--device", default="cuda", help="cpu: smoke-test the script at tiny size")
    args = ap.parse_args()
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.workload:
        device = torch.device(args.device)
        workload = WORKLOADS[name](device, None, "full" if device.type == "cuda" else "tiny")
        sync = torch.cuda.synchronize if device.type == "cuda" else lambda: None
        steps = {}
        for mode in make_modes(["inductor", "kernelpro"])[1:]:
            steps[mode.name] = step = prepare_mode(workload, mode)[2]
            for _ in range(3):
                step()
        times: dict[str, list[float]] = {k: [] for k in steps}
        for _ in range(args.rounds):
            for k, step in steps.items():
                sync()
                t = time.perf_counter()
                for _ in range(args.steps):
                    step()
                sync()
                times[k].append((time.perf_counter() - t) / args.steps * 1e3)
        row = {"workload": name, "dtype": str(workload.dtype), "ms": times}
        row["median_ms"] = {k: statistics.median(v) for k, v in times.items()}
        rows.append(row)
        print(json.dumps({"workload": name, "median_ms": row["median_ms"]}), flush=True)
        del steps, workload
        torch._dynamo.reset()
    (out / "compare_modes.json").write_text(json.dumps(rows, indent=1))
    print(f"\n{'workload':<12}{'inductor ms':>13}{'kernelpro ms':>14}{'ratio':>8}  (min-max)")
    for r in rows:
        m, t = r["median_ms"], r["ms"]
        spread = " ".join(f"{min(v):.3f}-{max(v):.3f}" for v in t.values())
        ratio = m["kernelpro"] / m["inductor"]
        print(
            f"{r['workload']:<12}{m['inductor']:>13.3f}{m['kernelpro']:>14.3f}{ratio:>8.3f}  {spread}"
        )


if __name__ == "__main__":
    main()
