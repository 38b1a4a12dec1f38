"""Search every subgraph of KernelBench problems (and bench workloads) into a fresh cache and
report trials, depth, fixed costs and where a trial's time goes (bench/search_report.py).

    python scripts/search_report.py --problems ../shared/kernelbench --budget-s 30 --out out/
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from kernelpro_backend.bench.problems import load_problem, problem_files
from kernelpro_backend.bench.search_report import report, summarize_logs, table
from kernelpro_backend.bench.workloads import WORKLOADS
from kernelpro_backend.tuner.searcher import release_gpu_memory
from kernelpro_backend.warmup import warmup


def write_report(out: Path, walls: dict[str, float]) -> dict:
    """The report over every search log so far (rewritten after each problem, so a run cut
    by its time limit still leaves one)."""
    logs = sorted((out / "cache" / "logs").glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
    data = report(summarize_logs(logs))
    data["warmup_wall_s"] = walls
    data["device"] = torch.cuda.get_device_name()
    (out / "search-report.json").write_text(json.dumps(data, indent=1, default=str))
    return data


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--problems", help="a directory of KernelBench-format files")
    p.add_argument("--only", default="", help="comma-separated substrings of problem names")
    p.add_argument("--workloads", default="", help="comma-separated bench workloads (train)")
    p.add_argument("--budget-s", type=float, default=30.0)
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    out = Path(args.out)
    options = {"cache_dir": str(out / "cache"), "progress": False}
    if args.workers:
        options["workers"] = args.workers
    device = torch.device("cuda")
    walls: dict[str, float] = {}
    files = problem_files(args.problems) if args.problems else []
    only = [s for s in args.only.split(",") if s]
    for path in files:
        if only and not any(s in path.stem for s in only):
            continue
        started = time.perf_counter()
        try:
            work = load_problem(path, device)
            warmup(work.model, work.inputs, train=False, budget_s=args.budget_s, options=options,
                   release_workers=False)  # fmt: skip
        except Exception as e:  # one problem's failure is reported, the others still run
            print(f"{path.stem}: FAILED {type(e).__name__}: {e}", flush=True)
        walls[path.stem] = round(time.perf_counter() - started, 1)
        print(f"{path.stem}: {walls[path.stem]} s", flush=True)
        write_report(out, walls)
        work = None  # type: ignore[assignment]
        torch.cuda.empty_cache()
    for name in [w for w in args.workloads.split(",") if w]:
        started = time.perf_counter()
        work = WORKLOADS[name](device, None, "full")
        warmup(work.model, work.inputs, budget_s=args.budget_s, loss_fn=work.loss_fn,
               options=options, release_workers=False)  # fmt: skip
        walls[name] = round(time.perf_counter() - started, 1)
        print(f"{name}: {walls[name]} s", flush=True)
        write_report(out, walls)
    release_gpu_memory()
    data = write_report(out, walls)
    print(table(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
