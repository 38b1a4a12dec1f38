"""Driver: CUTLASS 3 warp-specialised GEMMs (codegen/template_cutlass.py) against cuBLAS,
eager and Inductor on bf16 GEMM + epilogue cases, side by side in one process; every variant
checked against a float64 reference (its error next to eager's) before it is timed.

    OUT=/tmp/out PYTHONPATH=.:docs/gpu_runs/common python docs/gpu_runs/2026-11-26-cutlass/gpu_cutlass_gemm.py [--only gelu] [--jobs 8]

Needs nvcc and the CUTLASS headers (`nvidia-cutlass` wheel or CUTLASS_PATH). Writes
$OUT/gpu_cutlass_gemm.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn.functional as F
from scripts_common import ACTIVATIONS, median_ms

from kernelpro_backend.bench.gemm_sweep import gemm_subgraph
from kernelpro_backend.codegen import build
from kernelpro_backend.codegen.templates.cutlass import ENTRY_POINTS, CutlassGemm
from kernelpro_backend.lowering import lower
from kernelpro_backend.runtime.cuda.host import HostGemm, compile_library

# (name, M, K, N, activation, bias, residual)
CASES = [
    ("bf16 linear+bias+gelu 8192x1024->4096", 8192, 1024, 4096, "gelu", True, False),
    ("bf16 linear+bias+residual 8192x4096->1024", 8192, 4096, 1024, "identity", True, True),
    ("bf16 linear+bias+silu 8192x1024->4096", 8192, 1024, 4096, "silu", True, False),
    ("bf16 mm 4096^3", 4096, 4096, 4096, "identity", False, False),
    ("bf16 mm 8192^3", 8192, 8192, 8192, "identity", False, False),
]
SHAPES = [  # (schedule, tile, cluster)
    ("pingpong", (128, 128, 64), (1, 1)),
    ("pingpong", (128, 128, 64), (2, 1)),
    ("pingpong", (64, 256, 64), (1, 1)),
    ("cooperative", (128, 256, 64), (1, 1)),
    ("cooperative", (128, 256, 64), (2, 1)),
    ("cooperative", (256, 128, 64), (1, 1)),
    ("stream_k", (128, 128, 64), (1, 1)),
    ("stream_k", (128, 256, 64), (1, 1)),
]


class _LinearAct(torch.nn.Module):
    def __init__(self, w, b, act: str, residual: bool) -> None:
        super().__init__()
        self.w, self.b, self.act, self.residual = w, b, act, residual

    def forward(self, x, r):
        y = ACTIVATIONS[self.act](F.linear(x, self.w, self.b))
        return y + r if self.residual else y


def _triton_seed_ms(x, w, b, r, act: str, residual: bool) -> float:
    """The GEMM template's seed for the same subgraph (its inputs at the same shapes)."""
    sg = gemm_subgraph(_LinearAct(w, b, act, residual), (x, r), "ieee")
    kernel, inputs = build(lower(sg)), sg.make_inputs(0, "cuda")
    return median_ms(lambda: kernel(*inputs))


def run_case(case, libraries) -> dict:
    name, m, k, n, act, has_bias, residual = case
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    w = (torch.randn(n, k, device="cuda", generator=g) / k**0.5).bfloat16()
    b = torch.randn(n, device="cuda", generator=g).bfloat16() if has_bias else None
    r = torch.randn(m, n, device="cuda", generator=g).bfloat16() if residual else None

    def eager():
        y = ACTIVATIONS[act](F.linear(x, w, b))
        return y + r if residual else y

    y64 = F.linear(x.double(), w.double(), None if b is None else b.double())
    ref = ACTIVATIONS[act](y64) + (r.double() if residual else 0)
    compiled = torch.compile(eager)
    row: dict = {"case": name, "eager_error": (eager().double() - ref).abs().max().item()}
    row["cublas_ms"] = median_ms(lambda: F.linear(x, w))
    row["eager_ms"], row["inductor_ms"] = median_ms(eager), (compiled(), median_ms(compiled))[1]
    try:
        row["triton_seed_ms"] = _triton_seed_ms(x, w, b, r, act, residual)
    except Exception as e:
        row["triton_seed_error"] = f"{type(e).__name__}: {e}"[:300]
    row["variants"] = []
    for (schedule, tile, cluster), path in libraries[(act, has_bias, residual)].items():
        entry: dict = {"schedule": schedule, "tile": tile, "cluster": cluster}
        row["variants"].append(entry)
        if isinstance(path, str):
            entry["error"] = path
            continue
        try:
            gemm = HostGemm(path, bias=has_bias, source=residual)
            out = gemm(x, w, b, r)
            entry["max_error"] = (out.double() - ref).abs().max().item()
            entry["ok"] = entry["max_error"] <= 2 * row["eager_error"] + 1e-2
            entry["ms"] = median_ms(lambda gemm=gemm: gemm(x, w, b, r))
        except Exception as e:
            entry["error"] = f"{type(e).__name__}: {e}"[:300]
    return row


def build_all(configs: dict, jobs: int) -> dict:
    """{(act, bias, residual): {(schedule, tile, cluster): library path or an error}}."""
    todo = [(key, shape) for key in configs for shape in SHAPES]

    def build(item):
        (act, bias, residual), (schedule, tile, cluster) = item
        config = CutlassGemm(
            activation=act, bias=bias, source=residual, schedule=schedule, tile=tile,
            cluster=cluster,
        )  # fmt: skip
        try:
            return compile_library(config.source_text(), "sm_90a", symbols=ENTRY_POINTS)
        except Exception as e:
            return f"{type(e).__name__}: {str(e)[:300]}"

    with ThreadPoolExecutor(jobs) as pool:
        built = list(pool.map(build, todo))
    out: dict = {}
    for (key, shape), path in zip(todo, built, strict=True):
        out.setdefault(key, {})[shape] = path
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", action="append", default=[], help="cases whose name has this")
    p.add_argument("--jobs", type=int, default=8, help="nvcc processes at once")
    a = p.parse_args(argv)
    cases = [c for c in CASES if not a.only or any(o in c[0] for o in a.only)]
    t0 = time.time()
    libraries = build_all({(c[4], c[5], c[6]): None for c in cases}, a.jobs)
    print(f"built {sum(len(v) for v in libraries.values())} libraries in {time.time() - t0:.0f} s")
    results = [run_case(c, libraries) for c in cases]
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    meta["date"] = time.strftime("%Y-%m-%d %H:%M:%S")
    out = os.path.join(os.environ.get("OUT", "."), "gpu_cutlass_gemm.json")
    with open(out, "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1, default=str)
    print(
        f"{'case':<44}{'cuBLAS':>8}{'eager':>8}{'Inductor':>9}{'Triton seed':>12}"
        f"{'best CUTLASS':>13}  variant"
    )
    for row in results:
        ok = [v for v in row["variants"] if v.get("ok") and "ms" in v]
        best = min(ok, key=lambda v: v["ms"]) if ok else None
        text = f"{best['ms']:.4f}" if best else "-"
        which = f"{best['schedule']} {best['tile']} {best['cluster']}" if best else ""
        seed = f"{row['triton_seed_ms']:.4f}" if "triton_seed_ms" in row else "-"
        print(
            f"{row['case']:<44}{row['cublas_ms']:>8.4f}{row['eager_ms']:>8.4f}"
            f"{row['inductor_ms']:>9.4f}{seed:>12}{text:>13}  {which}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
