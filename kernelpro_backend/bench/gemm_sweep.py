"""The codegen GEMM template against cuBLAS and Inductor on real subgraphs, over its default
knobs and Inductor's H100 tile configurations, all timed in one run.

    OUT=/tmp/out PYTHONPATH=. python scripts/gpu_gemm_sweep.py [--budget-s 210] [--max-configs 14]
    PYTHONPATH=. python scripts/gpu_gemm_sweep.py --cpu-smoke   # tiny sizes, Triton interpreter

Each case compiles a small nn.Module through the kernelpro backend (fallback eager, search off)
and takes its GEMM subgraph. Every configuration is built, checked against the float64
reference with runtime/compare.py's tolerance (under the subgraph's precision policy, so tf32
is judged like PyTorch's own tf32), then timed with triton.testing.do_bench (median ms) next to
cuBLAS (torch.mm on the same operand views: the GEMM alone, no epilogue) and Inductor (the same
subgraph module under torch.compile, default mode: cuBLAS plus a fused epilogue kernel).
Ratios are times: ours/cuBLAS <= 1.10 is the goal for bf16/fp16 and tf32.
Results: $OUT/gpu_gemm_sweep.json; the table is printed last. A configuration that fails to
compile or is wrong is a row with its error, never a crash; configurations past the time
budget are listed as skipped.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
import traceback
import types
from collections.abc import Callable, Sequence

import torch
import torch.nn as nn

from ..codegen import IllegalSpec, KernelSpec, build
from ..codegen.gemm_configs import fitted_knobs, operand_kind
from ..explain import find_subgraphs
from ..fx_passes import Subgraph
from ..lowering import lower
from ..runtime.compare import compare, max_abs_error
from ..runtime.precision import precision_mode
from ..runtime.timing import time_kernel
from ..runtime.validate import compute_reference

DEVICE = "cuda"
# (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps), most promising first: Inductor's H100
# mm_configs / persistent_mm_configs for large GEMMs (template_heuristics/triton.py).
SWEEP_16BIT = (
    (128, 256, 64, 3, 8), (128, 256, 64, 4, 8), (128, 128, 64, 4, 8), (128, 128, 64, 3, 8),
    (128, 128, 64, 5, 8), (128, 128, 64, 3, 4), (256, 128, 64, 4, 8), (128, 128, 128, 3, 8),
    (128, 128, 128, 4, 8), (64, 128, 64, 3, 4), (128, 128, 32, 3, 4), (64, 128, 128, 4, 4),
)  # fmt: skip
SWEEP_TF32 = (
    (128, 256, 32, 3, 8), (128, 128, 32, 4, 8), (128, 128, 32, 3, 8), (128, 128, 64, 3, 8),
    (128, 128, 64, 3, 4), (256, 128, 32, 3, 8), (128, 64, 32, 4, 8), (64, 128, 32, 4, 4),
    (128, 128, 32, 2, 8), (64, 128, 64, 3, 4), (128, 256, 32, 4, 8), (64, 64, 64, 3, 8),
)  # fmt: skip


class MatMul(nn.Module):
    """x @ w with a row-major [K, N] weight (B read along N)."""

    def __init__(self, k: int, n: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(k, n) / k**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w


def gemm_subgraph(model: nn.Module, x: torch.Tensor) -> Subgraph:
    torch._dynamo.reset()
    found = find_subgraphs(model, x, train=False)
    gemms = [s for s in found if s.kind == "gemm"]
    if not gemms:
        raise RuntimeError(f"no GEMM subgraph among {[s.pattern for s in found]}")
    return gemms[0]


def cases(tiny: bool) -> list[tuple[str, str, Callable[[], tuple[nn.Module, torch.Tensor]]]]:
    """(name, float32 matmul precision, model and input factory)."""
    s = 16 if tiny else 1
    bf16 = torch.bfloat16

    def make(module: nn.Module, rows: int, cols: int, dt: torch.dtype) -> Callable:
        return lambda: (module.to(DEVICE, dt), torch.randn(rows, cols, device=DEVICE, dtype=dt))

    return [
        (f"bf16 mm {4096 // s}^3", "highest", make(MatMul(4096 // s, 4096 // s), 4096 // s, 4096 // s, bf16)),
        (
            f"bf16 linear+bias+gelu {8192 // s}x{4096 // s}x{1024 // s}", "highest",
            make(nn.Sequential(nn.Linear(1024 // s, 4096 // s), nn.GELU()), 8192 // s, 1024 // s, bf16),
        ),
        (
            f"bf16 linear {8192 // s}x{1024 // s}x{4096 // s}", "highest",
            make(nn.Linear(4096 // s, 1024 // s, bias=False), 8192 // s, 4096 // s, bf16),
        ),
        (f"tf32 mm {4096 // s}^3", "high", make(MatMul(4096 // s, 4096 // s), 4096 // s, 4096 // s, torch.float32)),
    ]  # fmt: skip


def label(knobs: dict) -> str:
    text = (
        f"{knobs['BLOCK_M']}x{knobs['BLOCK_N']}x{knobs['BLOCK_K']} "
        f"s{knobs['num_stages']} w{knobs['num_warps']} g{knobs['GROUP_M']}"
    )
    extras = [knobs.get("LOADS", "pointer")] + (["persistent"] if knobs["PERSISTENT"] else [])
    return text + " " + "+".join(extras)


def configs(spec: KernelSpec, limit: int) -> list[tuple[str, dict]]:
    """(name, knobs): the default, its TMA and persistent variants, then the sweep tiles."""
    default = dict(spec.knobs)
    found: list[tuple[str, dict]] = [("default", default)]
    tma, persistent = dict(LOADS="tma"), dict(PERSISTENT=True)
    variants = [
        dict(default, **tma),
        dict(default, **persistent),
        dict(default, **tma, **persistent),
    ]
    tiles = [
        fitted_knobs(spec, t)
        for t in (SWEEP_16BIT if operand_kind(spec) == "16bit" else SWEEP_TF32)
    ]
    variants += tiles[:5] + [dict(t, **tma) for t in tiles[1:3]] + tiles[5:]
    for knobs in variants:
        if len(found) >= limit:
            break
        if any(knobs == k for _, k in found):
            continue
        try:
            spec.with_knobs(**knobs)
        except IllegalSpec as e:
            print(f"  skip {label(knobs)}: {e}", flush=True)
            continue
        found.append(("candidate", knobs))
    return found


def bench(fn: Callable[[], object]) -> float:
    """Median ms of `fn` by the one kernel timer. Under --cpu-smoke one run shows the path works
    and the time is NaN: the interpreter's times mean nothing."""
    if DEVICE == "cpu":
        fn()
        return float("nan")
    return time_kernel(lambda: fn(), [()], torch.device(DEVICE)).median_ms


def operand_views(spec: KernelSpec, inputs: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """A and B exactly as the kernel reads them (offset and strides from the spec)."""
    views = []
    batch, m, n, k = (spec.param(x) for x in ("batch", "m", "n", "k"))
    for name, shape in (("a", (m, k)), ("b", (k, n))):
        index, offset, strides = spec.param(name)
        x = inputs[index]
        size, stride = ((batch, *shape), strides) if len(spec.domain) == 3 else (shape, strides[1:])
        views.append(x.as_strided(size, stride, x.storage_offset() + offset))
    return tuple(views)


def run_case(name: str, precision: str, make: Callable, budget_end: float, limit: int) -> dict:
    torch.set_float32_matmul_precision(precision)
    model, x = make()
    sg = gemm_subgraph(model, x)
    spec = lower(sg)
    m, n, k, batch = (spec.param(v) for v in ("m", "n", "k", "batch"))
    flop = 2.0 * m * n * k * batch
    case: dict = {
        "case": name,
        "pattern": sg.pattern,
        "precision": spec.precision,
        "mnk": [m, n, k],
    }
    case["inputs"] = [[list(s), list(st), dt] for s, st, dt in sg.input_meta]
    inputs = sg.make_inputs(1, DEVICE)
    with precision_mode(spec.precision):
        ref = compute_reference(sg.module(), inputs)
        a, b = operand_views(spec, inputs)
        mm = torch.bmm if a.dim() == 3 else torch.mm
        case["cublas_ms"] = bench(lambda: mm(a, b))
        if DEVICE == "cuda":
            try:
                inductor = torch.compile(sg.module())
                inductor(*inputs)
                case["inductor_ms"] = bench(lambda: inductor(*inputs))
            except Exception as e:
                case["inductor_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    rows = []
    for kind, knobs in configs(spec, limit):
        row: dict = {"config": label(knobs), "kind": kind, "knobs": knobs}
        rows.append(row)
        if time.time() > budget_end:
            row["status"] = "skipped (time budget)"
            continue
        try:
            t0 = time.time()
            kernel = build(spec.with_knobs(**knobs))
            with precision_mode(spec.precision):
                outs = kernel(*inputs)
                if DEVICE == "cuda":
                    torch.cuda.synchronize()
                row["build_s"] = round(time.time() - t0, 2)
                worst = 0.0
                for i, got in enumerate(outs):
                    eager = ref.eager[i] if ref.eager is not None else None
                    rejection, ratio = compare(i, got, ref.exact[i], eager)
                    worst = max(worst, ratio)
                    if rejection is not None:
                        raise AssertionError(f"wrong: {rejection.message}")
                row["error_ratio"] = round(worst, 4)  # worst error / allowed error
                # against float64: this kernel's largest error, and PyTorch eager's under the
                # spec's policy (IEEE float32 for ieee and tf32x3) on the same inputs
                exact = ref.exact
                row["max_abs_error"] = max(
                    max_abs_error(o, r) for o, r in zip(outs, exact, strict=True)
                )
                if ref.eager is not None:
                    row["eager_max_abs_error"] = max(
                        max_abs_error(e, r) for e, r in zip(ref.eager, exact, strict=True)
                    )
                row["ms"] = bench(functools.partial(kernel, *inputs))
            row["tflops"] = round(flop / (row["ms"] * 1e-3) / 1e12, 1)
            row["vs_cublas"] = round(row["ms"] / case["cublas_ms"], 3)
            if "inductor_ms" in case:
                row["vs_inductor"] = round(row["ms"] / case["inductor_ms"], 3)
            row["status"] = "ok"
        except Exception as e:  # a config that fails is a result, the others still run
            row["status"] = f"error: {type(e).__name__}: {str(e)[:400]}"
            traceback.print_exc(limit=2)
        print(f"  {row['config']:38} {row['status'][:60]} {row.get('ms', '')}", flush=True)
    case["configs"] = rows
    case["cublas_tflops"] = round(flop / (case["cublas_ms"] * 1e-3) / 1e12, 1)
    if "inductor_ms" in case:
        case["inductor_tflops"] = round(flop / (case["inductor_ms"] * 1e-3) / 1e12, 1)
    return case


def print_table(meta: dict, results: list[dict]) -> None:
    print(f"\n{meta['device']}  torch {meta['torch']}  triton {meta['triton']}  (do_bench median)")
    print("ratios are times: ours / baseline (< 1 is faster than the baseline)")
    head = f"{'case':34} {'config':38} {'ms':>8} {'TFLOP/s':>8} {'/cuBLAS':>8} {'/Inductor':>9}"
    print(head)
    for c in results:
        if "error" in c:
            print(f"{c['case']:34} {c['error'][:80]}")
            continue
        for base in ("cublas", "inductor"):
            if f"{base}_ms" in c:
                ms, tf = c[f"{base}_ms"], c[f"{base}_tflops"]
                print(f"{c['case']:34} {'[' + base + ']':38} {ms:8.4f} {tf:8.1f}")
        ok = [r for r in c["configs"] if r["status"] == "ok"]
        best = min(ok, key=lambda r: r["ms"]) if ok else None
        for r in c["configs"]:
            if r["status"] != "ok":
                print(f"{c['case']:34} {r['config']:38} {r['status'][:70]}")
                continue
            mark = " *" if r is best else ""
            ind = f"{r['vs_inductor']:9.3f}" if "vs_inductor" in r else f"{'-':>9}"
            print(
                f"{c['case']:34} {r['config'] + mark:38} {r['ms']:8.4f} {r['tflops']:8.1f} "
                f"{r['vs_cublas']:8.3f} {ind}"
            )
    print(
        "* = fastest config of the case; default knobs live in kernelpro_backend/codegen/gemm_configs.py"
    )


def sweep(
    budget_s: float = 210.0,
    max_configs: int = 14,
    cpu_smoke: bool = False,
    only: Sequence[str] = (),
) -> int:
    """Run the sweep (scripts/gpu_gemm_sweep.py parses its arguments) and write
    $OUT/gpu_gemm_sweep.json; returns the exit code."""
    args = types.SimpleNamespace(
        budget_s=budget_s, max_configs=max_configs, cpu_smoke=cpu_smoke, only=list(only)
    )
    global DEVICE
    if args.cpu_smoke:
        DEVICE = "cpu"
        os.environ["TRITON_INTERPRET"] = "1"
        args.max_configs = min(args.max_configs, 3)
    elif not torch.cuda.is_available():
        print("gpu_gemm_sweep: no CUDA GPU here; run it on the device machine", file=sys.stderr)
        return 2
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    out_dir = os.environ.get("OUT", ".")
    os.makedirs(out_dir, exist_ok=True)
    start = time.time()
    budget_end = start + args.budget_s
    results = []
    for name, precision, make in cases(args.cpu_smoke):
        if args.only and not any(o in name for o in args.only):
            continue
        print(f"{name} ({time.time() - start:.0f} s)", flush=True)
        try:
            results.append(run_case(name, precision, make, budget_end, args.max_configs))
        except Exception as e:
            traceback.print_exc()
            results.append({"case": name, "error": f"{type(e).__name__}: {str(e)[:400]}"})
    torch.set_float32_matmul_precision("highest")
    meta = {
        "device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (interpreter)",
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "wall_s": round(time.time() - start, 1),
    }
    with open(os.path.join(out_dir, "gpu_gemm_sweep.json"), "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    print_table(meta, results)
    return 0 if all("error" not in c for c in results) else 1
