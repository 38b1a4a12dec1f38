"""Driver: the tf32 form's product tile (codegen/template_tf32.py) at several sizes, beside
cuBLAS's TF32 GEMM (PyTorch's "high" float32 matmul precision) on the same inputs: time, and
the largest difference from cuBLAS's result and from float64 (cuBLAS's own beside it).

    OUT=/tmp/out PYTHONPATH=.:docs/gpu_runs/common python docs/gpu_runs/2026-11-27-tf32-form-tiles/gpu_tf32_tiles.py [--case 4096] ...

Cases: 'N' (square, x @ w with w [K, N]) or 'MxNxK[:linear]' (x @ w.T, w [N, K]) or
'MxNxK:gelu' (nn.Linear + GELU).
Writes $OUT/gpu_tf32_tiles.json; prints one line per case and tile.
"""

from __future__ import annotations

import argparse
import dataclasses

import torch
from scripts_common import median_ms
from tf32x3_common import _Linear, write

TILES = [  # BLOCK_M, BLOCK_N, BLOCK_K, warps, stages, GROUP_M
    (128, 128, 32, 8, 3, 8),
    (128, 256, 32, 8, 3, 8),
    (256, 128, 32, 8, 3, 8),
    (128, 128, 32, 4, 4, 8),
    (128, 128, 64, 8, 2, 8),
    (64, 128, 32, 4, 4, 8),
]


def _case(text: str) -> tuple[torch.nn.Module, tuple[int, int, int], str]:
    from kernelpro_backend.bench.gemm_cases import MatMul

    size, _, layout = text.partition(":")
    m, n, k = (int(x) for x in size.split("x")) if "x" in size else (int(size),) * 3
    if layout == "gelu":  # nn.Linear (bias) + GELU: the epilogue on the accumulator
        model: torch.nn.Module = torch.nn.Sequential(torch.nn.Linear(k, n), torch.nn.GELU())
    else:
        model = MatMul(k, n) if layout != "linear" else _Linear(k, n)
    return model.cuda(), (m, n, k), layout or "mm"


def run(text: str) -> dict:
    from kernelpro_backend.bench.gemm_sweep import gemm_subgraph
    from kernelpro_backend.codegen import alternatives
    from kernelpro_backend.codegen.spec import RenderedKernel
    from kernelpro_backend.codegen.templates.tf32 import render_tf32
    from kernelpro_backend.lowering import lower
    from kernelpro_backend.runtime.spec_kernel import build_kernel

    torch.set_float32_matmul_precision("high")
    torch.manual_seed(0)
    model, (m, n, k), layout = _case(text)
    sg = gemm_subgraph(model, (torch.randn(m, k, device="cuda"),), "tf32")
    seed = dataclasses.replace(lower(sg), precision="tf32")
    (form,) = [a for a in alternatives(seed) if a.template == "gemm_library"]
    inputs = sg.make_inputs(0, "cuda")
    exact = sg.module().double()(*[t.double() for t in inputs])[0]
    cublas = sg.module()(*inputs)[0]
    row: dict = {"case": text, "m": m, "n": n, "k": k, "layout": layout}
    row["cublas_ms"] = median_ms(lambda: sg.module()(*inputs))
    row["cublas_error"] = (cublas.double() - exact).abs().max().item()
    seed_fn = build_kernel(seed)
    row["seed_ms"] = median_ms(lambda: seed_fn(*inputs))
    row["tiles"] = []
    for tile in TILES:
        entry: dict = {"tile": list(tile)}
        try:
            source = render_tf32(form, "kernel", tile)
            fn = build_kernel(form, RenderedKernel("triton", source, "kernel"))
            out = fn(*inputs)[0]
            entry["error"] = (out.double() - exact).abs().max().item()
            entry["vs_cublas"] = (out - cublas).abs().max().item()
            entry["ms"] = median_ms(lambda fn=fn: fn(*inputs))
            entry["x_cublas"] = round(row["cublas_ms"] / entry["ms"], 3)
        except Exception as e:  # a tile that does not compile or fit: reported, not fatal
            entry["failed"] = f"{type(e).__name__}: {e}"[:300]
        row["tiles"].append(entry)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", help="N or MxNxK[:linear|:gelu] (repeatable)")
    args = parser.parse_args()
    rows = []
    for text in args.case or ["2048", "4096", "8192", "4096x4096x4096:linear"]:
        rows.append(run(text))
        write("gpu_tf32_tiles", rows)
        r = rows[-1]
        print(
            f"{text}: cuBLAS tf32 {r['cublas_ms']:.4f} ms (error {r['cublas_error']:.2e}), "
            f"GEMM template seed {r['seed_ms']:.4f} ms",
            flush=True,
        )
        for e in r["tiles"]:
            tile = "x".join(str(x) for x in e["tile"])
            print(
                f"   {tile:18s} "
                + (
                    e.get("failed")
                    or f"{e['ms']:.4f} ms {e['x_cublas']:.2f}x cuBLAS  error {e['error']:.2e}"
                    f"  vs cuBLAS {e['vs_cublas']:.2e}"
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
