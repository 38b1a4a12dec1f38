"""Probe (2026-11-25, H100): a Triton 3xTF32 kernel over tiles, grouped order, operand B K-major
or not, with the three products summed in one accumulator or two levels, against float64 and
IEEE cuBLAS. Raw: 2026-11-25-tf32x3-diag-triton-h100.json beside it.

    OUT=/tmp/out python docs/gpu_runs/2026-11-25-tf32x3-diag/tf32x3_diag_triton.py
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
    sbn,
    sbk,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    THREE: tl.constexpr,
    TWO_LEVEL: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    group = pid // (GROUP_M * num_pid_n)
    first_m = group * GROUP_M
    group_m = tl.minimum(num_pid_m - first_m, GROUP_M)
    pm = first_m + (pid % (GROUP_M * num_pid_n)) % group_m
    pn = (pid % (GROUP_M * num_pid_n)) // group_m
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    pa = rm[:, None] * K + rk[None, :]
    pb = rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), tl.float32)
    for _ in range(0, K, BK):
        a_h = tl.load(ah + pa)
        b_h = tl.load(bh + pb)
        if THREE:
            a_l = tl.load(al + pa)
            b_l = tl.load(bl + pb)
            if TWO_LEVEL:
                part = tl.dot(a_l, b_h, input_precision="tf32")
                part = tl.dot(a_h, b_l, part, input_precision="tf32")
                part = tl.dot(a_h, b_h, part, input_precision="tf32")
                acc += part
            else:
                acc = tl.dot(a_l, b_h, acc, input_precision="tf32")
                acc = tl.dot(a_h, b_l, acc, input_precision="tf32")
                acc = tl.dot(a_h, b_h, acc, input_precision="tf32")
        else:
            acc = tl.dot(a_h, b_h, acc, input_precision="tf32")
        pa += BK
        pb += BK * sbk
    tl.store(c + rm[:, None] * N + rn[None, :], acc)


def tri(ah, al, bh, bl, kmajor, three, two, BM, BN, BK, w, s):
    M, K = ah.shape
    N = bh.shape[1] if not kmajor else bh.shape[0]
    c = torch.empty(M, N, device=dev)
    sbn, sbk = (K, 1) if kmajor else (1, N)
    mm3[(M // BM * (N // BN),)](
        ah,
        al,
        bh,
        bl,
        c,
        M,
        N,
        K,
        sbn,
        sbk,
        BM=BM,
        BN=BN,
        BK=BK,
        THREE=three,
        TWO_LEVEL=two,
        GROUP_M=8,
        num_warps=w,
        num_stages=s,
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
        return triton.testing.do_bench(f, rep=150)

    r = {}
    torch.set_float32_matmul_precision("highest")
    r["ieee"] = (err(a @ b), t(lambda: a @ b))
    ah, al = split(a)
    bh, bl = split(b)
    bht, blt = bh.t().contiguous(), bl.t().contiguous()
    hh64 = ah.double() @ bh.double()
    for km in (False, True):
        B1, B2 = (bht, blt) if km else (bh, bl)
        for cfg in (
            (128, 128, 32, 8, 3),
            (128, 128, 32, 4, 3),
            (128, 256, 32, 8, 2),
            (128, 128, 64, 8, 2),
            (64, 128, 32, 4, 4),
            (256, 128, 32, 8, 2),
        ):
            name = f"km{int(km)}_{cfg}"
            try:
                c = tri(ah, al, B1, B2, km, False, False, *cfg)
                r["tf32_" + name] = (
                    float((c.double() - hh64).abs().max()),
                    t(partial(tri, ah, al, B1, B2, km, False, False, *cfg)),
                )
                for two in (False, True):
                    c = tri(ah, al, B1, B2, km, True, two, *cfg)
                    r[f"x3_two{int(two)}_" + name] = (
                        err(c),
                        t(partial(tri, ah, al, B1, B2, km, True, two, *cfg)),
                    )
            except Exception as e:
                r[name] = (str(e)[:60], 0)
    # split cost
    r["split_ms"] = (0, t(lambda: split(a)))
    return r


res = {}
for n in (2048, 4096, 8192):
    res[n] = measure(n)
    for k, v in res[n].items():
        print(n, f"{k:40}", v, flush=True)
with open(os.environ.get("OUT", ".") + "/tf32diag2.json", "w") as f:
    json.dump(res, f, indent=1)
