"""Driver: the tf32x3 form's main-kernel tile (template_tf32x3 BLOCK_M/N/K, warps, stages) at
several sizes, each configuration checked against float64 (error no larger than IEEE cuBLAS's
on the same inputs) and timed beside IEEE cuBLAS in one process. Prints a table; writes
$OUT/gpu_tf32x3_tiles.json.

    OUT=/tmp/out PYTHONPATH=.:scripts python scripts/gpu_tf32x3_tiles.py [--sizes 2048 4096 8192]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
from scripts_common import median_ms

import kernelpro_backend.codegen.template_tf32x3 as t3
from kernelpro_backend.bench.gemm_cases import MatMul
from kernelpro_backend.bench.gemm_sweep import gemm_subgraph
from kernelpro_backend.codegen import alternatives, build
from kernelpro_backend.lowering import lower

# (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages); the first is the template's own
CONFIGS = [
    (128, 128, 32, 8, 3),
    (128, 256, 32, 8, 2),
    (256, 128, 32, 8, 2),
    (128, 128, 32, 4, 3),
    (128, 128, 16, 8, 4),
    (64, 128, 32, 4, 4),
    (128, 64, 32, 4, 4),
    (128, 256, 16, 8, 3),
]


def run_size(n: int) -> dict:
    torch.set_float32_matmul_precision("highest")
    torch.manual_seed(0)
    model = MatMul(n, n).cuda()
    x = torch.randn(n, n, device="cuda")
    sg = gemm_subgraph(model, (x,), "tf32x3")
    (form,) = [a for a in alternatives(lower(sg)) if a.template == "gemm_library"]
    inputs = sg.make_inputs(0, "cuda")
    exact = sg.module().double()(*[t.double() for t in inputs])[0]
    ieee = sg.module()(*inputs)[0]
    row: dict = {"n": n, "ieee_ms": median_ms(lambda: sg.module()(*inputs))}
    row["ieee_error"] = (ieee.double() - exact).abs().max().item()
    row["configs"] = []
    saved = (t3.BLOCK_M, t3.BLOCK_N, t3.BLOCK_K, t3.WARPS, t3.STAGES)
    for bm, bn, bk, warps, stages in CONFIGS:
        entry: dict = {"config": [bm, bn, bk, warps, stages]}
        row["configs"].append(entry)
        t3.BLOCK_M, t3.BLOCK_N, t3.BLOCK_K, t3.WARPS, t3.STAGES = bm, bn, bk, warps, stages
        try:
            kernel = build(form)
            (got,) = kernel(*inputs)
            entry["error"] = (got.double() - exact).abs().max().item()
            entry["ok"] = entry["error"] <= row["ieee_error"]
            entry["ms"] = median_ms(lambda kernel=kernel: kernel(*inputs))
            entry["x_ieee"] = round(row["ieee_ms"] / entry["ms"], 3)
        except Exception as e:
            entry["failed"] = f"{type(e).__name__}: {e}"[:300]
        finally:
            t3.BLOCK_M, t3.BLOCK_N, t3.BLOCK_K, t3.WARPS, t3.STAGES = saved
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096, 8192])
    a = p.parse_args(argv)
    rows = [run_size(n) for n in a.sizes]
    meta = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    with open(os.path.join(os.environ.get("OUT", "."), "gpu_tf32x3_tiles.json"), "w") as f:
        json.dump({"meta": meta, "results": rows}, f, indent=1)
    for row in rows:
        print(f"{row['n']}^3  IEEE cuBLAS {row['ieee_ms']:.4f} ms  error {row['ieee_error']:.2e}")
        for c in row["configs"]:
            text = c.get("failed") or (
                f"{c['ms']:.4f} ms  {c['x_ieee']:.2f}x  error {c['error']:.2e}"
                f"{'' if c['ok'] else '  (MORE THAN IEEE)'}"
            )
            print(f"   {c['config']}  {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
