"""GPU: warm the cache for the bench workloads (search on miss, forward and backward), then
export the cache as one bundle, the one shipped in the repo's `cache/` folder.

Each workload warms up in its own process with a deadline, so a slow one cannot eat the whole
run; what finished is stored as soon as it is found (warm-up resumes where it stopped).

    OUT=/tmp/out python3 scripts/gpu_warmup_bench.py [--workload NAME ...] [--deadline-s 500]
        [--patterns sdpa_backward,softmax]     # search only these subgraph patterns
Writes $OUT/sm90-bench.tar.gz, $OUT/warmup_bench.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time

# $KERNELPRO_CACHE_DIR when set (so the bench's kernelpro mode reads what was warmed), else
# a scratch folder
CACHE = os.environ.get("KERNELPRO_CACHE_DIR", "/tmp/kp_bench_cache")


def warm_one(
    name: str, budget_s: float, trials: int, workers: int, patterns: str, deadline_s: float
) -> dict:
    import torch

    from kernelpro_backend.bench.workloads import WORKLOADS
    from kernelpro_backend.warmup.offline import warmup

    w = WORKLOADS[name](torch.device("cuda"), None, "full")
    t0 = time.time()
    report = warmup(
        w.fresh_model(),
        w.inputs,
        train=w.training,
        loss_fn=w.loss_fn,
        budget_s=budget_s,
        deadline_s=deadline_s,  # the searches leave the in-context check its share
        options={
            "cache_dir": CACHE,
            "max_trials": trials,
            "workers": workers,
            "progress": False,
            "search_patterns": patterns,
        },
    )
    return {
        "workload": name,
        "seconds": time.time() - t0,
        "rows": [r.__dict__ for r in report.rows],
        "context": report.context,  # the in-context check's timings and verdicts
    }


def _run_child(name: str, args: argparse.Namespace, left: float, out_dir: str) -> dict:
    """Warm one workload in a child process, killed with its workers at the deadline."""
    cmd = [sys.executable, __file__, "--one", name, "--budget-s", str(args.budget_s)]
    cmd += ["--trials", str(args.trials), "--workers", str(args.workers)]
    cmd += ["--patterns", args.patterns]
    cmd += ["--deadline-s", str(max(left - 20, 10))]  # the child ends before it is killed
    # Own session: on the deadline the whole group (the search's worker processes too) dies.
    # The child's log goes to one file as it runs, so a deadline still shows how far it got.
    log = open(os.path.join(out_dir, "warmup_children.log"), "a")  # noqa: SIM115
    log.write(f"=== {name}\n")
    log.flush()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True
    )
    try:
        stdout, _ = proc.communicate(timeout=left)
        if proc.returncode == 0:
            result = json.loads(stdout.strip().splitlines()[-1])
        else:
            result = {"workload": name, "error": f"exit {proc.returncode}, see log"}
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        result = {"workload": name, "error": f"deadline after {left:.0f} s"}
    log.close()
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", action="append")
    ap.add_argument("--one")
    ap.add_argument("--deadline-s", type=float, default=500)
    ap.add_argument("--budget-s", type=float, default=10)
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--patterns", default="", help="search only these patterns (comma-separated)")
    args = ap.parse_args()
    if args.one:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
        print(
            json.dumps(
                warm_one(
                    args.one,
                    args.budget_s,
                    args.trials,
                    args.workers,
                    args.patterns,
                    args.deadline_s,
                )  # fmt: skip
            )
        )
        return
    names = args.workload or [
        "gpt_block",
        "mlp",
        "softmax",
        "layer_norm",
        "rms_norm",
        "cross_entropy",
        "gemm_bias_gelu",
        "attention",
        "moe",
        "convnet",
    ]
    out_dir = os.environ.get("OUT", ".")
    start = time.time()
    results = []
    for name in names:
        left = args.deadline_s - (time.time() - start)
        if left < 30:
            results.append({"workload": name, "skipped": "deadline"})
            continue
        results.append(_run_child(name, args, left, out_dir))
        print(json.dumps({k: v for k, v in results[-1].items() if k != "rows"}), flush=True)

    from kernelpro_backend.cache import KernelCache
    from kernelpro_backend.cache.transfer import export_bundle

    with KernelCache(CACHE) as cache:
        exported = export_bundle(cache, os.path.join(out_dir, "sm90-bench.tar.gz"))
    with open(os.path.join(out_dir, "warmup_bench.json"), "w") as fh:
        json.dump({"results": results, "exported": len(exported)}, fh, indent=1)
    print(f"\n{'workload':<16}{'subgraphs':>10}{'kernels':>9}{'seconds':>9}")
    for r in results:
        rows = r.get("rows", [])
        kernels = sum(row["result"] == "kernel" for row in rows)
        status = (
            f"{r.get('seconds', 0):9.0f}"
            if "rows" in r
            else "  " + str(r.get("skipped") or "error")
        )
        print(f"{r['workload']:<16}{len(rows):>10}{kernels:>9}{status}")
    for r in results:
        for row in r.get("rows", []):
            if row["result"] == "kernel":
                print(f"  kernel: {r['workload']} {row['graph']} {row['pattern']} {row['key']}")
        for line in r.get("context", []):
            print(f"  {r['workload']}: {line}")
    print(f"bundle: {len(exported)} entries")


if __name__ == "__main__":
    main()
