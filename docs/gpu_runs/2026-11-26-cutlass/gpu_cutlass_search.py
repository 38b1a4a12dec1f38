"""Driver: the real search of 16-bit GEMM + epilogue subgraphs with the CUTLASS GEMM in its space.
The CUTLASS libraries of each case are built first (tuner/cutlass_builds.py, what a search
queues; a warm-up's later searches find them built), then SubgraphSearcher searches the
subgraph (built-in proposer, `--budget-s`) into $OUT/cache, and its winner is stored there like
any search's. Prints, per case, the search's own side-by-side figures (eager, Inductor, the
best candidate of each template) and the winner; writes $OUT/gpu_cutlass_search.json.
Then export, import into a fresh cache and `kernelpro cache verify` re-prove it (the shell).

    OUT=/tmp/out PYTHONPATH=.:docs/gpu_runs/common python docs/gpu_runs/2026-11-26-cutlass/gpu_cutlass_search.py [--budget-s 30] [--only gelu]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
from scripts_common import ACTIVATIONS, median_ms

from kernelpro_backend import make_backend
from kernelpro_backend.bench.gemm_sweep import gemm_subgraph
from kernelpro_backend.cache import KernelCache
from kernelpro_backend.cache.entries import describe
from kernelpro_backend.lowering import lower
from kernelpro_backend.options import Options
from kernelpro_backend.tuner.searcher import SubgraphSearcher

# (name: its dtype first, M, K, N, activation, residual)
CASES = [
    ("bf16 linear+bias+gelu 8192x1024->4096", 8192, 1024, 4096, "gelu", False),
    ("bf16 linear+bias+residual 8192x4096->1024", 8192, 4096, 1024, "identity", True),
    ("fp16 linear+bias+gelu 8192x1024->4096", 8192, 1024, 4096, "gelu", False),
    ("bf16 linear+bias+gelu_tanh 8192x1024->4096", 8192, 1024, 4096, "gelu_tanh", False),
    ("bf16 linear+bias+swish*2 8192x1024->4096", 8192, 1024, 4096, "swish2", False),
]


class _LinearAct(torch.nn.Module):
    def __init__(self, k: int, n: int, act: str, residual: bool) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(k, n)
        self.act, self.residual = act, residual

    def forward(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        y = ACTIVATIONS[self.act](y)
        return y + r if self.residual else y


def _trials(log: Path) -> dict:
    """Per template: trials, proved, best ms; and the search's baselines."""
    out: dict = {"templates": {}}
    for line in log.read_text().splitlines():
        event = json.loads(line)
        if event.get("event") == "start":
            base = event.get("baselines") or {}
            out["baselines"] = {f"{k}_ms": base.get(k) for k in ("eager", "inductor")}
        if event.get("event") == "end":
            out["end"] = {k: event.get(k) for k in ("stop_reason", "trials", "kept_kernel")}
        if event.get("event") != "trial" or not event.get("candidate"):
            continue
        t = out["templates"].setdefault(
            event["candidate"].get("template", "source"), {"trials": 0, "ok": 0, "best_ms": None}
        )
        t["trials"] += 1
        if event["status"] == "ok" and event.get("median_ms"):
            t["ok"] += 1
            best = t["best_ms"]
            t["best_ms"] = event["median_ms"] if best is None else min(best, event["median_ms"])
            if t["best_ms"] == event["median_ms"]:
                t["best_knobs"] = event["candidate"].get("knobs")
        elif event["status"] != "ok":
            t.setdefault("failures", []).append(str(event.get("message"))[:200])
    return out


def run_case(case, budget_s: float, cache_dir: str) -> dict:  # type: ignore[no-untyped-def]
    name, m, k, n, act, residual = case
    dtype = torch.float16 if name.startswith("fp16") else torch.bfloat16
    model = _LinearAct(k, n, act, residual).cuda().to(dtype)
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    r = torch.randn(m, n, device="cuda", dtype=dtype)
    sg = gemm_subgraph(model, (x, r), "ieee")
    options = Options(cache_dir=cache_dir, budget_s=budget_s, progress=False, cutlass_jobs=12)
    searcher = SubgraphSearcher(options)
    t0 = time.time()
    queued = searcher.cutlass.start(lower(sg))
    done = searcher.cutlass.wait(540)
    row: dict = {"case": name, "pattern": sg.pattern, "builds_queued": queued}
    row["build_s"], row["builds_done"] = round(time.time() - t0, 1), done
    row["build_failures"] = list(searcher.cutlass.failed.values())[:2]
    t0 = time.time()
    artifact = searcher(sg)
    row["search_s"] = round(time.time() - t0, 1)
    logs = sorted(Path(cache_dir, "logs").glob(f"{sg.key.digest[:16]}.jsonl"))
    row |= _trials(logs[-1]) if logs else {"error": "no search log"}
    if artifact is not None:
        spec = json.loads(artifact.spec_json) if artifact.spec_json else {}
        row["winner"] = {"template": spec.get("template"), "knobs": spec.get("knobs")}
        row["winner"]["ms"] = artifact.kernel_ms
        with KernelCache(cache_dir) as cache:
            cache.put(cache.key_for(sg.key), describe(artifact, sg))  # as the finder stores
        row["model"] = _model_from_cache(model, (x, r), cache_dir)
    return row


def _model_from_cache(model, inputs, cache_dir: str) -> dict:  # type: ignore[no-untyped-def]
    """The model compiled by kernelpro from that cache alone (no search), against eager and
    Inductor in this process: its output, subgraphs replaced, time."""
    sessions: list = []
    options = {"search": "cache-only", "cache_dir": cache_dir, "progress": False}
    torch._dynamo.reset()
    with torch.no_grad():
        ours = torch.compile(model, backend=make_backend(sessions=sessions), options=options)
        got, want = ours(*inputs), model(*inputs)
        row = {"max_error": (got.float() - want.float()).abs().max().item()}
        row["replaced"] = sum(len(r.replaced) for s in sessions for r in s.reports)
        row["kernelpro_ms"] = median_ms(lambda: ours(*inputs))
        torch._dynamo.reset()
        inductor = torch.compile(model)
        inductor(*inputs)
        row["inductor_ms"], row["eager_ms"] = (
            median_ms(lambda: inductor(*inputs)),
            median_ms(lambda: model(*inputs)),
        )
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget-s", type=float, default=30.0)
    p.add_argument("--only", action="append", default=[])
    a = p.parse_args(argv)
    out = os.environ.get("OUT", ".")
    cache_dir = os.path.join(out, "cache")
    rows = []
    for case in CASES:
        if a.only and not any(o in case[0] for o in a.only):
            continue
        try:
            rows.append(run_case(case, a.budget_s, cache_dir))
        except Exception as e:
            rows.append({"case": case[0], "error": f"{type(e).__name__}: {e}"[:400]})
        print(json.dumps(rows[-1], default=str)[:1500], flush=True)
    meta = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    with open(os.path.join(out, "gpu_cutlass_search.json"), "w") as f:
        json.dump({"meta": meta, "results": rows}, f, indent=1, default=str)
    print(f"{'case':<44}{'eager':>8}{'Inductor':>9}{'triton':>9}{'cutlass':>9}  winner")
    for row in rows:
        base, t = row.get("baselines") or {}, row.get("templates") or {}
        best = {name: (t.get(name) or {}).get("best_ms") for name in ("gemm", "gemm_cutlass")}
        cells = [base.get("eager_ms"), base.get("inductor_ms"), best["gemm"], best["gemm_cutlass"]]
        text = "".join(f"{v:>9.4f}" if v else f"{'-':>9}" for v in cells)
        print(f"{row['case']:<44}{text}  {row.get('winner') or row.get('error')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
