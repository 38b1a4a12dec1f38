"""Dynamic-shape bench on the GPU: training loops whose shapes change, eager vs Inductor vs
kernelpro (cache-only, after an optional warm-up over the same shapes), side by side.

OUT=/tmp/out PYTHONPATH=. python scripts/gpu_shapes_bench.py [--schedule mini_gpt_lengths]
    [--warmup-budget-s 20 --patterns softmax,cross_entropy] [--rounds 3] [--tiny]
    [--cache-dir DIR [--warmup-only]]   # a warm-up in one run, the timed modes in another
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile

import torch

from kernelpro_backend.bench.shapes import SCHEDULES, run_schedule, table
from kernelpro_backend.warmup import warmup


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--schedule", nargs="*", default=sorted(SCHEDULES))
    p.add_argument("--warmup-budget-s", type=float, default=0.0, help="0: no warm-up")
    p.add_argument("--patterns", default="", help="warm up only these subgraph patterns")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--warmup-only", action="store_true", help="fill --cache-dir and stop")
    a = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cache_dir = a.cache_dir or tempfile.mkdtemp(prefix="kernelpro-shapes-")
    options = {"cache_dir": cache_dir}
    rows = []
    for name in a.schedule:
        schedule = SCHEDULES[name](device, a.tiny)
        if a.warmup_budget_s > 0:
            warm = {**options, **({"search_patterns": a.patterns} if a.patterns else {})}
            report = warmup(
                schedule.model, schedule.steps[0], more_inputs=schedule.steps[1:],
                budget_s=a.warmup_budget_s, loss_fn=lambda out: out, options=warm,
            )  # fmt: skip
            print(report.table(), flush=True)
        if a.warmup_only:
            continue
        rows += run_schedule(schedule, rounds=a.rounds, options=options)
        print(table(rows), flush=True)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "shapes-bench.json"), "w") as f:
            json.dump([dataclasses.asdict(r) for r in rows], f, indent=1)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
