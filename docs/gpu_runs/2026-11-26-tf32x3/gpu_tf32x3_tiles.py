"""Driver: the tf32x3 form's main-kernel tile (template_tf32x3 BLOCK_M/N/K, warps, stages) at
several sizes, each configuration checked against float64 (error no larger than IEEE cuBLAS's
on the same inputs) and timed beside IEEE cuBLAS in one process. Prints a table; writes
$OUT/gpu_tf32x3_tiles.json.

    OUT=/tmp/out PYTHONPATH=.:docs/gpu_runs/common python docs/gpu_runs/2026-11-26-tf32x3/gpu_tf32x3_tiles.py [--sizes 2048 4096 8192]
"""

from __future__ import annotations

import argparse
import sys

from tf32x3_common import gemm_case, measure, report

import kernelpro_backend.codegen.templates.tf32x3 as t3
from kernelpro_backend.codegen import build

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
    _, form, inputs, exact, row = gemm_case(n)
    row["configs"] = []
    saved = (t3.BLOCK_M, t3.BLOCK_N, t3.BLOCK_K, t3.WARPS, t3.STAGES)
    for bm, bn, bk, warps, stages in CONFIGS:
        entry: dict = {"config": [bm, bn, bk, warps, stages]}
        row["configs"].append(entry)
        t3.BLOCK_M, t3.BLOCK_N, t3.BLOCK_K, t3.WARPS, t3.STAGES = bm, bn, bk, warps, stages
        try:
            kernel = build(form)
            measure(entry, lambda kernel=kernel: lambda: kernel(*inputs)[0], exact, row)
        finally:
            t3.BLOCK_M, t3.BLOCK_N, t3.BLOCK_K, t3.WARPS, t3.STAGES = saved
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096, 8192])
    a = p.parse_args(argv)
    rows = [run_size(n) for n in a.sizes]
    report("gpu_tf32x3_tiles", rows, "configs", lambda c: str(c["config"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
