"""Probe: objective="time" against objective="energy", side by side in one process (issue 60).

For memory-bound rows (softmax, LayerNorm, RMSNorm at 8192x8192), GEMMs (bf16 4096^3, fp32
4096^3 under TF32) and two small training steps (a GPT block and an MLP, their row subgraphs
searched), each case is compiled by kernelpro once per objective, each into its own fresh cache
(a search on every miss, a few seconds of budget per subgraph), and by Inductor; then each
compiled call is timed (do_bench, or steps back to back for training) and its joules per call
read from NVML's energy counter (profilers/energy.py) twice, interleaved across the modes,
so the table shows the counter's repeatability beside the difference. The search logs' energy
choices (winner against fastest, in the worker) are kept too. No new case starts after
--deadline-s; those left are listed. Writes $OUT/energy.json and $OUT/energy.txt; prints the
table last.

    OUT=/tmp/out python docs/gpu_runs/2026-12-06-energy/probe.py [--budget-s 3] [--only softmax]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from triton.testing import do_bench

from kernelpro_backend import make_backend
from kernelpro_backend.bench.models import DeepMLP, GPTBlock
from kernelpro_backend.bench.timing import steady_ms, step_energy
from kernelpro_backend.profilers.energy import NvmlMeter, measure_energy, power_cap

ROW_PATTERNS = ("layer_norm", "layer_norm_backward", "softmax", "softmax_backward",
                "rms_norm", "rms_norm_backward", "norm", "norm_backward")  # fmt: skip
N = 8192


def _softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def _rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w


def _layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


def _call_cases() -> dict[str, Callable[[], tuple[Callable[..., Any], tuple[Any, ...], str]]]:
    """name -> builder of (function, inputs, float32 matmul precision)."""

    def rows(fn: Callable[..., Any], dtype: torch.dtype, extra: int) -> Any:
        def build() -> tuple[Callable[..., Any], tuple[Any, ...], str]:
            x = torch.randn(N, N, device="cuda", dtype=dtype)
            params = [torch.randn(N, device="cuda", dtype=dtype) for _ in range(extra)]
            return fn, (x, *params), "highest"

        return build

    def gemm(dtype: torch.dtype, precision: str) -> Any:
        def build() -> tuple[Callable[..., Any], tuple[Any, ...], str]:
            a = torch.randn(4096, 4096, device="cuda", dtype=dtype)
            b = torch.randn(4096, 4096, device="cuda", dtype=dtype)
            return _mm, (a, b), precision

        return build

    return {
        "softmax 8192x8192 fp32": rows(_softmax, torch.float32, 0),
        "softmax 8192x8192 bf16": rows(_softmax, torch.bfloat16, 0),
        "layernorm 8192x8192 fp32": rows(_layernorm, torch.float32, 2),
        "rmsnorm 8192x8192 bf16": rows(_rmsnorm, torch.bfloat16, 1),
        "gemm bf16 4096^3": gemm(torch.bfloat16, "highest"),
        "gemm fp32 4096^3 tf32": gemm(torch.float32, "high"),
    }


def _train_cases() -> dict[str, Callable[[], tuple[torch.nn.Module, torch.Tensor]]]:
    def gpt() -> tuple[torch.nn.Module, torch.Tensor]:
        model = GPTBlock(1024, 16).cuda().to(torch.bfloat16)
        return model, torch.randn(4, 1024, 1024, device="cuda", dtype=torch.bfloat16)

    def mlp() -> tuple[torch.nn.Module, torch.Tensor]:
        return DeepMLP(1024, 4096, 1024).cuda(), torch.randn(8192, 1024, device="cuda")

    return {"train gpt_block bf16 4x1024x1024": gpt, "train mlp fp32 8192x1024x4096": mlp}


def _options(objective: str, budget_s: float, cache_dir: str, rows_only: bool) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "search": "on-miss", "objective": objective, "budget_s": budget_s, "max_trials": 10,
        "cache_dir": cache_dir, "progress": False, "cutlass_jobs": 0,
    }  # fmt: skip
    if rows_only:
        opts["search_patterns"] = ROW_PATTERNS
    return opts


def _search_choices(cache_dir: str) -> list[dict[str, Any]]:
    """Each search's end: pattern, winner, its ms, the energy choice (if any)."""
    out = []
    for log in sorted(Path(cache_dir, "logs").glob("*.jsonl")):
        events = [json.loads(line) for line in log.read_text().splitlines()]
        start = next((e for e in events if e["event"] == "start"), {})
        for end in (e for e in events if e["event"] == "end"):
            out.append({"pattern": start.get("pattern"), "baselines": start.get("baselines"),
                        "baseline_energy_j": start.get("baseline_energy_j"),
                        "winner": end.get("winner"), "best_ms": end.get("best_ms"),
                        "trials": end.get("trials"),
                        "energy_choice": end.get("energy_choice")})  # fmt: skip
    return out


def _compile(fn: Any, mode: str, budget_s: float, rows_only: bool) -> tuple[Any, dict[str, Any]]:
    torch._dynamo.reset()
    if mode == "inductor":
        return torch.compile(fn), {}
    cache_dir = tempfile.mkdtemp(prefix=f"kp-{mode}-")
    sessions: list[Any] = []
    compiled = torch.compile(
        fn,
        backend=make_backend(sessions=sessions),
        options=_options(mode, budget_s, cache_dir, rows_only),
    )
    return compiled, {"cache_dir": cache_dir, "sessions": sessions}


def _replaced(info: dict[str, Any]) -> int | None:
    sessions = info.get("sessions")
    if sessions is None:
        return None
    return sum(len(r.replaced) for s in sessions for r in s.reports)


MODES = ("time", "energy", "inductor")
# One of each kind first (rows, GEMM, training), so a run cut by --deadline-s has each kind
ORDER = [
    "softmax 8192x8192 fp32", "rmsnorm 8192x8192 bf16", "gemm bf16 4096^3",
    "train gpt_block bf16 4x1024x1024", "layernorm 8192x8192 fp32", "softmax 8192x8192 bf16",
    "gemm fp32 4096^3 tf32", "train mlp fp32 8192x1024x4096",
]  # fmt: skip


def run_call(name: str, build: Any, budget_s: float) -> dict[str, Any]:
    fn, inputs, precision = build()
    torch.set_float32_matmul_precision(precision)
    row: dict[str, Any] = {}
    calls = {}
    with torch.no_grad():
        for mode in MODES:
            t0 = time.time()
            compiled, info = _compile(fn, mode, budget_s, rows_only=False)
            compiled(*inputs)  # the search happens here
            torch.cuda.synchronize()
            calls[mode] = compiled
            row[mode] = {"compile_s": round(time.time() - t0, 1), "replaced": _replaced(info)}
            if "cache_dir" in info:
                row[mode]["searches"] = _search_choices(info["cache_dir"])
        for mode in MODES:
            row[mode]["ms"] = do_bench(lambda m=mode: calls[m](*inputs), warmup=25, rep=200)
        for _ in range(2):  # interleaved: the spread of the two readings is the counter's noise
            for mode in MODES:
                reading = measure_energy(calls[mode], inputs)
                row[mode].setdefault("j_runs", []).append(
                    None if reading is None else reading.joules_per_call
                )
    torch.set_float32_matmul_precision("highest")
    return _finish(row)


def run_train(name: str, build: Any, budget_s: float) -> dict[str, Any]:
    base, x = build()
    device = x.device
    row: dict[str, Any] = {}
    steps = {}
    for mode in MODES:
        model = copy.deepcopy(base)  # the same weights in every mode
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        t0 = time.time()
        compiled, info = _compile(model, mode, budget_s, rows_only=True)

        def step(c: Any = compiled, o: Any = opt) -> None:
            o.zero_grad(set_to_none=True)
            c(x).float().pow(2).mean().backward()
            o.step()

        step()
        torch.cuda.synchronize()
        steps[mode] = step
        row[mode] = {"compile_s": round(time.time() - t0, 1), "replaced": _replaced(info)}
        if "cache_dir" in info:
            row[mode]["searches"] = _search_choices(info["cache_dir"])
    for mode in MODES:
        first = do_bench(steps[mode], warmup=10, rep=50)
        row[mode]["ms"] = steady_ms(steps[mode], device, first)
    for _ in range(2):
        for mode in MODES:
            reading = step_energy(steps[mode], device, row[mode]["ms"])
            row[mode].setdefault("j_runs", []).append(
                None if reading is None else reading.joules_per_call
            )
    return _finish(row)


def _finish(row: dict[str, Any]) -> dict[str, Any]:
    for mode in MODES:
        runs = [j for j in row[mode].get("j_runs", []) if j is not None]
        row[mode]["J"] = sum(runs) / len(runs) if runs else None
        row[mode]["j_spread"] = (max(runs) - min(runs)) / max(runs) if len(runs) > 1 else None
        row[mode]["ms"] = round(row[mode]["ms"], 5)
    t, e = row["time"], row["energy"]
    if t["J"] and e["J"] and t["ms"]:
        row["energy_vs_time"] = {"J": e["J"] / t["J"] - 1, "ms": e["ms"] / t["ms"] - 1}
    return row


def _table(results: dict[str, Any]) -> str:
    head = f"{'case':34} {'mode':9} {'ms':>9} {'mJ':>10} {'J spread':>8} {'kernels':>7}"
    lines = [head, "-" * len(head)]
    for case, row in results.items():
        if "error" in row or "skipped" in row:
            lines.append(f"{case:34} {row.get('error') or row.get('skipped')}")
            continue
        for mode in MODES:
            m = row[mode]
            mj = "-" if m["J"] is None else f"{m['J'] * 1e3:.4g}"
            spread = "-" if m["j_spread"] is None else f"{100 * m['j_spread']:.1f}%"
            lines.append(f"{case:34} {mode:9} {m['ms']:9.4g} {mj:>10} {spread:>8} "
                         f"{m['replaced'] if m['replaced'] is not None else '-':>7}")  # fmt: skip
        d = row.get("energy_vs_time")
        if d:
            lines.append(
                f"{'':34} energy vs time: {100 * d['J']:+.1f}% J at {100 * d['ms']:+.1f}% ms"
            )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget-s", type=float, default=3.0, help="search seconds per subgraph")
    p.add_argument("--deadline-s", type=float, default=150.0, help="no case starts after this")
    p.add_argument("--only", action="append", default=[], help="cases whose name has this")
    a = p.parse_args()
    out = Path(os.environ.get("OUT", "."))
    started = time.time()
    cap = power_cap(NvmlMeter.open(0))
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "power_cap": cap.to_dict() if cap else None, "budget_s": a.budget_s}  # fmt: skip
    results: dict[str, Any] = {}
    calls, trains = _call_cases(), _train_cases()
    cases: list[tuple[str, Any, Any]] = [(n, b, run_call) for n, b in calls.items()]
    cases += [(n, b, run_train) for n, b in trains.items()]
    cases.sort(key=lambda c: ORDER.index(c[0]))
    for name, build, runner in cases:
        if a.only and not any(o in name for o in a.only):
            continue
        if time.time() - started > a.deadline_s:
            results[name] = {"skipped": f"past --deadline-s {a.deadline_s:g}: --only '{name}'"}
            continue
        t0 = time.time()
        try:
            results[name] = runner(name, build, a.budget_s)
        except Exception as e:  # one case failing must not lose the others
            results[name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        results[name]["case_s"] = round(time.time() - t0, 1)
        print(name, json.dumps(results[name], default=str)[:600], flush=True)
        (out / "energy.json").write_text(json.dumps({"meta": meta, "cases": results}, indent=1,
                                                    default=str))  # fmt: skip
    table = _table(results)
    (out / "energy.txt").write_text(f"{json.dumps(meta)}\n{table}\n")
    print(json.dumps(meta))
    print(table)


if __name__ == "__main__":
    main()
