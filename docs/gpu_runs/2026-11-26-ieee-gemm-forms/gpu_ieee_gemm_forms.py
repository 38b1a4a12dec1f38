"""Driver: why the GEMM template's IEEE float32 kernel ran 1.7x slower than Inductor's
max-autotune kernel at the same tile on KernelBench L1_9 (32768x32 @ 32x32768, H100: 3.41 ms
against ~2.0 for 64x64x32, 2 stages, 4 warps). One Triton kernel with the two templates'
differences as switches — the accumulator passed to the dot or added after it, the
contiguity hints on the rows of A and columns of B, int64 or int32 offsets — each checked
against IEEE cuBLAS and timed beside it. Prints a table; writes $OUT/gpu_ieee_gemm_forms.json.

    OUT=/tmp/out PYTHONPATH=.:docs/gpu_runs/common python docs/gpu_runs/2026-11-26-ieee-gemm-forms/gpu_ieee_gemm_forms.py [--shapes 32768x32768x32 4096x4096x4096]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys

import torch
import triton
import triton.language as tl
from grouped_order import grouped_tile
from scripts_common import median_ms


@triton.jit
def mm(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
       GROUP_M: tl.constexpr, ADD_AFTER: tl.constexpr, HINTS: tl.constexpr):  # fmt: skip
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if HINTS:
        rm = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
        rn = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * K + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * N + rn[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, K // BLOCK_K):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        if ADD_AFTER:
            acc += tl.dot(a, b, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * N
    cm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M))[:, None]
    cn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N))[None, :]
    tl.store(c_ptr + cm * N + cn, acc, mask=(cm < M) & (cn < N))


TILES = ((64, 64, 32, 2, 4), (64, 64, 32, 5, 4), (128, 128, 32, 3, 8), (64, 128, 32, 3, 4))


def run(m: int, n: int, k: int) -> dict:
    torch.manual_seed(0)
    a, b = torch.rand(m, k, device="cuda"), torch.rand(k, n, device="cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    ref = a @ b
    row: dict = {"shape": [m, n, k], "cublas_ms": median_ms(lambda: a @ b), "variants": []}
    for (bm, bn, bk, stages, warps), add_after, hints in itertools.product(
        TILES, (False, True), (False, True)
    ):
        bk = min(bk, k)
        entry = {"tile": [bm, bn, bk, stages, warps], "add_after": add_after, "hints": hints}
        row["variants"].append(entry)

        def call(bm=bm, bn=bn, bk=bk, stages=stages, warps=warps, add_after=add_after, hints=hints):
            c = torch.empty(m, n, device="cuda")
            grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
            mm[grid](a, b, c, m, n, k, bm, bn, bk, 8, add_after, hints,
                     num_warps=warps, num_stages=stages)  # fmt: skip
            return c

        try:
            entry["error"] = float((call() - ref).abs().max())
            entry["ms"] = median_ms(call)
        except Exception as e:  # a tile that does not fit is a result too
            entry["failed"] = f"{type(e).__name__}: {e}"[:200]
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", default=["32768x32768x32", "4096x4096x4096"])
    args = p.parse_args(argv)
    rows = [run(*(int(x) for x in s.split("x"))) for s in args.shapes]
    with open(os.path.join(os.environ.get("OUT", "."), "gpu_ieee_gemm_forms.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "results": rows}, f, indent=1)
    for row in rows:
        print(f"{'x'.join(map(str, row['shape']))}  IEEE cuBLAS {row['cublas_ms']:.4f} ms")
        for e in row["variants"]:
            t = "x".join(map(str, e["tile"][:3])) + f" s{e['tile'][3]} w{e['tile'][4]}"
            how = (
                f"{'acc += dot' if e['add_after'] else 'dot(acc)'} {'hints' if e['hints'] else '-'}"
            )
            got = e.get("failed") or f"{e['ms']:.4f} ms  error {e['error']:.1e}"
            print(f"   {t:20s} {how:18s} {got}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
