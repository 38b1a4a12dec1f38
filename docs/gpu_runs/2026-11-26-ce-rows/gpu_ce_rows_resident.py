"""Experiment: the cross-entropy row kernel with the whole row held in registers (read from
memory once, no second read from L2), against today's streamed kernel (linear_ce_rows.py) and a
plain copy of the logits, on the LM-head op's chunks. Variants: warps per row, and whether the
second pass recomputes exp(x - lse) or reuses the first pass's exp(x - max) (more registers).

PYTHONPATH=.:docs/gpu_runs/common python docs/gpu_runs/2026-11-26-ce-rows/gpu_ce_rows_resident.py [--shapes 4194x32000 3998x32000]
"""

from __future__ import annotations

import argparse
import functools

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from kernelpro_backend.ops.linear_ce_rows import REREAD_HINTS, _kernel, rows_aten


@triton.jit
def ce_rows_resident(
    logits, stride, target, loss, scale, n_cols, ignore_index, BLOCK: tl.constexpr,
    REUSE: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    base = logits + row * stride
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    t = tl.load(target + row)
    x = tl.load(base + cols, mask=mask, other=float("-inf"))  # kept in the logits' dtype
    xf = x.to(tl.float32)
    m = tl.max(xf, 0)
    e = tl.exp(xf - m)
    total = tl.sum(e, 0)
    lse = m + tl.log(total)
    valid = t != ignore_index
    safe = tl.where(valid, t, 0)
    picked = tl.load(base + safe).to(tl.float32)
    tl.store(loss + row, tl.where(valid, lse - picked, 0.0))
    k = tl.where(valid, scale, 0.0)
    if REUSE:
        g = e * (k / total)
    else:
        g = tl.exp(x.to(tl.float32) - lse) * k
    g = tl.where(cols == safe, g - k, g)
    tl.store(base + cols, g.to(logits.dtype.element_ty), mask=mask)


@triton.jit
def ce_rows_streamed(
    logits, stride, target, loss, scale, n_cols, ignore_index, BLOCK: tl.constexpr,
    STAGES: tl.constexpr, REVERSE: tl.constexpr,
):  # fmt: skip
    """Today's streamed kernel with its first loop software-pipelined (`STAGES`) and its second
    pass over the row in reverse (the blocks read last first: most likely still in L1/L2)."""
    row = tl.program_id(0).to(tl.int64)
    base = logits + row * stride
    t = tl.load(target + row)
    cols = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], -3.4028234663852886e38, tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in tl.range(0, n_cols, BLOCK, num_stages=STAGES):
        x = tl.load(
            base + start + cols, mask=start + cols < n_cols, other=float("-inf"),
            eviction_policy="evict_last",
        ).to(tl.float32)  # fmt: skip
        d = x - m
        e = tl.exp(-tl.abs(d))
        up = d > 0
        s = tl.where(up, s * e + 1.0, s + e)
        m = tl.where(up, x, m)
    row_max = tl.max(m, 0)
    total = tl.sum(s * tl.where(m == float("-inf"), 0.0, tl.exp(m - row_max)), 0)
    lse = row_max + tl.log(total)
    valid = t != ignore_index
    safe = tl.where(valid, t, 0)
    picked = tl.load(base + safe).to(tl.float32)
    tl.store(loss + row, tl.where(valid, lse - picked, 0.0))
    k = tl.where(valid, scale, 0.0)
    last = (n_cols - 1) // BLOCK * BLOCK
    for i in tl.range(0, n_cols, BLOCK, num_stages=STAGES):
        start = last - i if REVERSE else i
        mask = start + cols < n_cols
        x = tl.load(base + start + cols, mask=mask, other=0.0, eviction_policy="evict_first")
        g = tl.exp(x.to(tl.float32) - lse) * k
        g = tl.where(start + cols == safe, g - k, g)
        tl.store(base + start + cols, g.to(logits.dtype.element_ty), mask=mask)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", nargs="*", default=["4194x32000", "3998x32000"])
    a = parser.parse_args()
    streamed = _kernel(False)
    print(f"{'rows x cols':<14}{'variant':<30}{'ms':>8}{'TB/s':>7}{'max err':>10}")
    for rows, cols in (tuple(int(v) for v in s.split("x")) for s in a.shapes):
        src = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16) * 3
        target = torch.randint(0, cols, (rows,), device="cuda")
        target[::7] = -100
        scale = 1.0 / rows
        ref = src.clone()
        ref_loss = rows_aten(ref, target, scale, -100, True)  # ATen on the GPU tensors
        nbytes = 2 * src.numel() * src.element_size()
        work = src.clone()
        loss = torch.empty(rows, device="cuda")
        ms = do_bench(lambda: work.copy_(src), warmup=5, rep=50)  # noqa: B023
        print(f"{rows}x{cols:<8}{'copy':<30}{ms:>8.3f}{nbytes / ms / 1e9:>7.2f}")
        args = (work, cols, target, loss, scale, cols, -100)
        block = 1 << (cols - 1).bit_length()
        variants = {"streamed 4096 w16 (today)": functools.partial(
            streamed[(rows,)], *args, True, 4096, *REREAD_HINTS, num_warps=16)}  # fmt: skip
        for stages in (1, 2, 3):
            for reverse in (False, True):
                for warps in (8, 16):
                    name = f"streamed s{stages} w{warps}" + (" reverse" if reverse else "")
                    variants[name] = functools.partial(
                        ce_rows_streamed[(rows,)], *args, 4096, stages, reverse, num_warps=warps
                    )
        for warps in (16, 32):
            for reuse in (False, True):
                name = f"resident w{warps}" + (" reuse" if reuse else "")
                variants[name] = functools.partial(
                    ce_rows_resident[(rows,)], *args, block, reuse, num_warps=warps
                )
        for name, run in variants.items():
            try:
                work.copy_(src)
                run()
                err = max(
                    (work.float() - ref.float()).abs().max().item(),
                    (loss - ref_loss).abs().max().item(),
                )
                ms = do_bench(run, warmup=5, rep=50)
            except Exception as e:  # out of resources: report and go on
                print(f"{rows}x{cols:<8}{name:<30}{type(e).__name__}: {str(e)[:80]}")
                continue
            print(f"{rows}x{cols:<8}{name:<30}{ms:>8.3f}{nbytes / ms / 1e9:>7.2f}{err:>10.2e}")


if __name__ == "__main__":
    main()
