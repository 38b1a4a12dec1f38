"""Probe (2026-11-25, H100): float32 GEMM split into TF32 hi/lo parts (3xTF32) by cuBLAS calls
(three mm, or one concatenated mm) and by a plain Triton kernel, each against float64 and IEEE
cuBLAS, at 2048-8192 square. Raw: 2026-11-25-tf32x3-diag-cublas-h100.json beside it.

    OUT=/tmp/out python docs/gpu_runs/2026-11-25-tf32x3-diag/tf32x3_diag_cublas.py
"""

import json
import os
from functools import partial

import torch
import triton
import triton.language as tl

torch.manual_seed(0)
dev = "cuda"


def split(x):
    bits = x.view(torch.int32)
    hi = ((bits + 0x1000) & -8192).view(torch.float32)
    lo = x - hi
    lo = ((lo.view(torch.int32) + 0x1000) & -8192).view(torch.float32)
    return hi, lo


@triton.jit
def mm3(
    ah,
    al,
    bh,
    bl,
    c,
    M,
    N,
    K,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    THREE: tl.constexpr,
):
    pid = tl.program_id(0)
    nb = tl.cdiv(N, BN)
    pm, pn = pid // nb, pid % nb
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        ia = rm[:, None] * K + (k + rk)[None, :]
        ib = (k + rk)[:, None] * N + rn[None, :]
        a_h = tl.load(ah + ia)
        b_h = tl.load(bh + ib)
        if THREE:
            a_l = tl.load(al + ia)
            b_l = tl.load(bl + ib)
            acc = tl.dot(a_l, b_h, acc, input_precision="tf32")
            acc = tl.dot(a_h, b_l, acc, input_precision="tf32")
        acc = tl.dot(a_h, b_h, acc, input_precision="tf32")
    tl.store(c + rm[:, None] * N + rn[None, :], acc)


def tri(ah, al, bh, bl, three=True, BM=128, BN=128, BK=32, w=8, s=3):
    M, K = ah.shape
    N = bh.shape[1]
    c = torch.empty(M, N, device=dev)
    mm3[(M // BM * (N // BN),)](
        ah, al, bh, bl, c, M, N, K, BM=BM, BN=BN, BK=BK, THREE=three, num_warps=w, num_stages=s
    )
    return c


def measure(n):
    """Each variant's (largest error, ms) at n x n x n."""
    a = torch.randn(n, n, device=dev)
    b = torch.randn(n, n, device=dev)
    ref = a.double() @ b.double()

    def err(x):
        return float((x.double() - ref).abs().max())

    def t(f):
        return triton.testing.do_bench(f, rep=200)

    r = {}
    torch.set_float32_matmul_precision("highest")
    r["ieee"] = (err(a @ b), t(lambda: a @ b))
    ah, al = split(a)
    bh, bl = split(b)
    r["repr_only_f64"] = (
        err(al.double() @ bh.double() + ah.double() @ bl.double() + ah.double() @ bh.double()),
        0,
    )
    torch.set_float32_matmul_precision("high")
    hh = ah @ bh
    r["cublas_tf32_hihi_vs_f64_hihi"] = (
        float((hh.double() - ah.double() @ bh.double()).abs().max()),
        t(lambda: ah @ bh),
    )
    z = torch.cat([al, ah], 1)
    w = torch.cat([bh, bl], 0)

    def v1():
        out = z @ w
        out.addmm_(ah, bh)
        return out

    r["cublas_concat"] = (err(v1()), t(v1))

    def v2():
        out = al @ bh
        out.addmm_(ah, bl)
        out.addmm_(ah, bh)
        return out

    r["cublas_3mm"] = (err(v2()), t(v2))
    torch.set_float32_matmul_precision("highest")
    for cfg in (
        (128, 128, 32, 8, 3),
        (128, 256, 32, 8, 3),
        (128, 128, 32, 4, 4),
        (256, 128, 32, 8, 3),
    ):
        try:
            c = tri(ah, al, bh, bl, True, *cfg)
            r[f"triton3_{cfg}"] = (err(c), t(partial(tri, ah, al, bh, bl, True, *cfg)))
        except Exception as e:
            r[f"triton3_{cfg}"] = (str(e)[:80], 0)
    c = tri(ah, al, bh, bl, False)
    r["triton_tf32_hihi_vs_f64_hihi"] = (
        float((c.double() - ah.double() @ bh.double()).abs().max()),
        t(partial(tri, ah, al, bh, bl, False)),
    )
    return r


res = {}
for n in (2048, 4096, 8192):
    res[n] = measure(n)
    for k, v in res[n].items():
        print(n, f"{k:40}", v)
with open(os.environ.get("OUT", ".") + "/tf32diag.json", "w") as f:
    json.dump(res, f, indent=1)
