"""Probe (issue 56, "baselines as the fallback really runs them"): does the worker time a conv's
baselines as the compiled graph runs them, and does kernelpro end up as fast as the faster of
eager and Inductor?

Cases (float32, inference, PyTorch's default conv policy: cuDNN TF32 on):
- L1_63: the KernelBench problem (PROBE_PROBLEM, default /work/shared/kernelbench/L1_63_...py)
  at its real size, one conv (16x16x1024x1024 -> 16x128x1022x1022). On the H100 (2026-12-06)
  eager ran 7.06 ms, Inductor 12.59 and kernelpro 12.59 (its eager candidate not installed).
- r50_1x1: ResNet-50's 1x1 reduce conv [128,256,56,56] -> 64 channels between two ReLUs, so
  its input is an activation the graph makes (channels-last in Inductor's graph).

Per case, first in workers (runtime/pool.py, as a search measures them), for each conv
subgraph: eager; inductor_graph (compiled with the whole graph's layout decision, its
activations laid as Inductor lays them there, the user's Inductor options: runtime/fallback.py);
inductor_alone (as before: the subgraph compiled alone, NCHW in and out). Then in this process:
eager, torch.compile (Inductor) and kernelpro (search on a miss, PROBE_SEARCH_S=10 s a
subgraph, a fresh cache dir, conv subgraphs only), medians of ROUNDS interleaved rounds after the
in-context verdict settled; the search logs' baselines and what kernelpro installed.
JSON: $OUT/in_graph_baseline.json; a table last. PROBE_SMOKE=1: tiny shapes on the CPU
(checks the probe itself: no search there).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from kernelpro_backend.backend import make_backend
from kernelpro_backend.options import Options
from kernelpro_backend.runtime import BaselineCandidate, Job, WorkerPool
from kernelpro_backend.runtime.fallback import FallbackSettings

SMOKE = os.environ.get("PROBE_SMOKE") == "1"
DEV = "cpu" if SMOKE else "cuda"
if SMOKE:  # CPU convolutions are IEEE: so is the policy then
    torch.backends.cudnn.allow_tf32 = False
OUT = Path(os.environ.get("OUT", "."))
PROBLEM = os.environ.get(
    "PROBE_PROBLEM",
    "/work/shared/kernelbench/L1_63_conv_standard_2D__square_input__square_kernel.py",
)
SEARCH_S = float(os.environ.get("PROBE_SEARCH_S", "10"))
ROUNDS = 5
ROUND_S = 0.02 if SMOKE else 0.3  # timed calls per round: about this long
CONVS = ["convolution", "convolution+epilogue"]


def l1_63() -> tuple[torch.nn.Module, list[torch.Tensor]]:
    spec = importlib.util.spec_from_file_location("kb_l1_63", PROBLEM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if SMOKE:
        return torch.nn.Conv2d(4, 8, 3, bias=False), [torch.rand(2, 4, 16, 16)]
    return module.Model(*module.get_init_inputs()), list(module.get_inputs())


def r50_1x1() -> tuple[torch.nn.Module, list[torch.Tensor]]:
    c, n, hw = (16, 2, 8) if SMOKE else (256, 128, 56)
    conv = torch.nn.Conv2d(c, c // 4, 1, bias=False)
    return torch.nn.Sequential(torch.nn.ReLU(), conv, torch.nn.ReLU()), [torch.randn(n, c, hw, hw)]


CASES = {"L1_63": l1_63, "r50_1x1": r50_1x1}


def conv_subgraphs(model: torch.nn.Module, inputs: list[torch.Tensor]) -> list[Any]:
    found: list[Any] = []
    backend = make_backend(observer=lambda kind, sgs: found.extend(sgs))
    opts = {"search": "off", "fallback": "eager"}
    torch.compile(model, backend=backend, options=opts)(*inputs)
    torch._dynamo.reset()
    return [s for s in found if s.kind == "conv"]


def brief(result: Any) -> dict[str, Any]:
    if not result.ok:
        return {"ok": False, "error": result.message[:300]}
    return {"ok": True, "ms": result.median_ms, "spread_ms": result.spread_ms}


def worker_figures(subgraphs: list[Any]) -> dict[str, Any]:
    """Each conv subgraph's baselines as a search measures them, and Inductor's as before."""
    opts = Options()
    out: dict[str, Any] = {}
    with WorkerPool(workers=1, timeout_s=300) as pool:
        for i, sg in enumerate(subgraphs):
            job = dataclasses.replace(
                Job.from_subgraph(sg, BaselineCandidate("eager")),
                timing_budget_s=opts.timing_s,
                timing_settle=opts.timing_settle,
            )
            eager, graph = job.baselines()
            flags = FallbackSettings(cudnn_benchmark=job.fallback.cudnn_benchmark)
            alone = dataclasses.replace(graph, input_meta=job.input_meta, fallback=flags)
            results = pool.evaluate_many([eager, graph, alone])
            names = ("eager", "inductor_graph", "inductor_alone")
            out[f"{i}:{sg.pattern}"] = {
                **{n: brief(r) for n, r in zip(names, results, strict=True)},
                "inductor_options": {k: v for k, v in job.fallback.inductor if "layout" in k},
                "laid_channels_last": job.fallback.graph_input_meta is not None,
            }
    return out


def sync() -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


def time_call(fn: Any, inputs: list[torch.Tensor]) -> float:
    """ms a call over about ROUND_S of back-to-back calls (host clock around a sync)."""
    sync()
    start, calls = time.perf_counter(), 0
    while time.perf_counter() - start < ROUND_S or calls < 3:
        fn(*inputs)
        calls += 1
    sync()
    return (time.perf_counter() - start) * 1e3 / calls


def in_graph(model: torch.nn.Module, inputs: list[torch.Tensor], cache: str) -> dict[str, Any]:
    sessions: list[Any] = []
    options = {"search": "on-miss", "budget_s": SEARCH_S, "cache_dir": cache}
    kp = make_backend(sessions=sessions)
    modes = {
        "eager": model,
        "inductor": torch.compile(model),
        "kernelpro": torch.compile(
            model, backend=kp, options={**options, "search_patterns": CONVS}
        ),
    }
    compile_s: dict[str, float] = {}
    for name, fn in modes.items():
        start = time.perf_counter()
        for _ in range(40 if name == "kernelpro" else 2):  # the in-context verdict settles
            fn(*inputs)
        sync()
        compile_s[name] = round(time.perf_counter() - start, 2)
    rounds: dict[str, list[float]] = {name: [] for name in modes}
    for _ in range(ROUNDS):
        for name, fn in modes.items():
            rounds[name].append(time_call(fn, inputs))
    reports = [r for s in sessions for r in s.reports]
    return {
        "ms": {n: statistics.median(v) for n, v in rounds.items()},
        "rounds_ms": rounds,
        "compile_s": compile_s,
        "kernels": [
            {
                "graph": r.graph,
                "replaced": r.replaced,
                "in_context": r.in_context,
                "dropped": r.dropped,
                "isolated": {k: v.as_list() for k, v in r.isolated.items()},
            }
            for r in reports
        ],  # fmt: skip
        "search_logs": search_logs(Path(cache)),
    }


def search_logs(cache: Path) -> list[dict[str, Any]]:
    """The start event of each search: the baselines the search measured."""
    found = []
    for path in sorted((cache / "logs").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event.get("event") == "start":
                keep = ("pattern", "baselines", "baseline_errors", "fixed_s")
                found.append({k: event.get(k) for k in keep})
    return found


def run_case(name: str) -> dict[str, Any]:
    model, inputs = CASES[name]()
    model = model.to(DEV).eval()
    inputs = [x.to(DEV) for x in inputs]
    with torch.no_grad():
        subgraphs = conv_subgraphs(model, inputs)
        workers = worker_figures(subgraphs)
        del subgraphs
        graph = in_graph(model, inputs, tempfile.mkdtemp(prefix="kernelpro-probe-"))
    torch._dynamo.reset()
    if DEV == "cuda":
        torch.cuda.empty_cache()
    return {"workers": workers, "in_graph": graph}


def table(results: dict[str, Any]) -> None:
    for name, r in results.items():
        ms = r["in_graph"]["ms"]
        line = ", ".join(f"{k} {v:.3f}" for k, v in ms.items())
        print(f"{name}: in the graph (ms a call): {line}; kernelpro/Inductor "
              f"{ms['inductor'] / ms['kernelpro']:.2f}x")  # fmt: skip
        for sg, w in r["workers"].items():
            cells = [
                f"{k} {v['ms']:.3f}" if v.get("ok") else f"{k} FAILED ({v.get('error', '')[:80]})"
                for k, v in w.items()
                if isinstance(v, dict) and "ok" in v
            ]
            laid = "activations NHWC" if w["laid_channels_last"] else "aten strides"
            print(f"  worker {sg}: {', '.join(cells)}; {w['inductor_options']}, {laid}")
        for log in r["in_graph"]["search_logs"]:
            print(f"  search {log['pattern']}: baselines {log['baselines']} "
                  f"errors {log['baseline_errors']}")  # fmt: skip
        for k in r["in_graph"]["kernels"]:
            print(f"  kernelpro {k['graph']}: replaced {len(k['replaced'])}, "
                  f"in context {k['in_context'] or 'not judged'}, isolated {k['isolated']}")  # fmt: skip


def main() -> None:
    chosen = os.environ.get("PROBE_CASES", ",".join(CASES)).split(",")
    meta = {
        "device": torch.cuda.get_device_name() if DEV == "cuda" else "cpu",
        "torch": torch.__version__,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "search_s": SEARCH_S,
        "date": time.strftime("%Y-%m-%d"),
    }
    results: dict[str, Any] = {}
    OUT.mkdir(parents=True, exist_ok=True)
    for name in chosen:
        started = time.perf_counter()
        results[name] = run_case(name)
        results[name]["wall_s"] = round(time.perf_counter() - started, 1)
        print(f"{name} done in {results[name]['wall_s']} s", file=sys.stderr, flush=True)
        table({name: results[name]})  # after each case: a call cut later keeps it (2026-12-06)
        (OUT / "in_graph_baseline.json").write_text(json.dumps({"meta": meta, **results}, indent=1))
    print(json.dumps(meta))
    table(results)


if __name__ == "__main__":
    main()
