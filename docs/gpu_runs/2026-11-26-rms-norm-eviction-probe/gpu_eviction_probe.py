"""Probe behind the row template's eviction hints and 32-warp default for re-read rows
(BENCHMARKS.md, rows, 2026-11-26): RMSNorm forward bf16 4096x65536 as a hand-written two-loop
Triton kernel at three column blocks x four warp counts, with and without L2 eviction hints,
and as one pass holding the row, beside Inductor's default and max-autotune.

    OUT=$OUT python docs/gpu_runs/2026-11-26-rms-norm-eviction-probe/gpu_eviction_probe.py   # writes $OUT/evict_probe.json
"""

import json
import os

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

R, C = 4096, 65536


@triton.jit
def two_pass(
    in0,
    in1,
    out0,
    NC: tl.constexpr,
    BLOCK_C: tl.constexpr,
    EV1: tl.constexpr,
    EV2: tl.constexpr,
    EVW: tl.constexpr,
):
    r = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK_C], tl.float32)
    for c0 in range(0, NC, BLOCK_C):
        col = c0 + tl.arange(0, BLOCK_C)
        x = tl.load(in0 + r * NC + col, eviction_policy=EV1).to(tl.float32)
        acc += x * x
    s = tl.rsqrt(tl.sum(acc, 0) / NC + 1e-6)
    for c0 in range(0, NC, BLOCK_C):
        col = c0 + tl.arange(0, BLOCK_C)
        x = tl.load(in0 + r * NC + col, eviction_policy=EV2).to(tl.float32)
        w = tl.load(in1 + col, eviction_policy=EVW).to(tl.float32)
        tl.store(out0 + r * NC + col, (x * s * w).to(tl.bfloat16))


@triton.jit
def one_pass(in0, in1, out0, NC: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    col = tl.arange(0, NC)
    x = tl.load(in0 + r * NC + col).to(tl.float32)
    s = tl.rsqrt(tl.sum(x * x, 0) / NC + 1e-6)
    w = tl.load(in1 + col).to(tl.float32)
    tl.store(out0 + r * NC + col, (x * s * w).to(tl.bfloat16))


def main():
    out_dir = os.environ.get("OUT", "/tmp")
    x = torch.randn(R, C, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(C, device="cuda", dtype=torch.bfloat16)
    ref = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(
        torch.bfloat16
    )
    o = torch.empty_like(x)
    res = {}

    def rec(name, fn):
        try:
            fn()
            torch.cuda.synchronize()
            err = (o.float() - ref.float()).abs().max().item()
            ms = do_bench(fn, warmup=25, rep=200)
            res[name] = (ms, err)
        except Exception as e:
            res[name] = (None, repr(e)[:200])
        print(name, res[name], flush=True)

    for bc in (2048, 4096, 8192):
        for nw in (4, 8, 16, 32):
            for ev in (("", "", ""), ("evict_last", "evict_first", "evict_last")):
                tag = "hints" if ev[0] else "none"
                rec(
                    f"2pass b{bc} w{nw} {tag}",
                    lambda bc=bc, nw=nw, ev=ev: two_pass[(R,)](
                        x, w, o, C, bc, ev[0], ev[1], ev[2], num_warps=nw, num_stages=1
                    ),
                )
    for nw in (16, 32):
        rec(f"1pass w{nw}", lambda nw=nw: one_pass[(R,)](x, w, o, C, num_warps=nw, num_stages=1))

    class RMS(torch.nn.Module):
        def __init__(s):
            super().__init__()
            s.weight = torch.nn.Parameter(w.clone())

        def forward(s, x):
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(
                x.dtype
            ) * s.weight

    m = RMS()
    for mode in ("default", "max-autotune-no-cudagraphs"):
        torch._dynamo.reset()
        f = torch.compile(m, mode=mode)
        with torch.no_grad():
            f(x)
            torch.cuda.synchronize()
            ms = do_bench(lambda f=f: f(x), warmup=25, rep=200)
        res["inductor " + mode] = (ms, None)
        print("inductor", mode, ms, flush=True)
    with open(os.path.join(out_dir, "evict_probe.json"), "w") as fh:
        json.dump(res, fh, indent=1)
    print("\nsorted:")
    for k, v in sorted(res.items(), key=lambda kv: kv[1][0] or 99):
        print(f"{k:32s} {v[0]}")


if __name__ == "__main__":
    main()
