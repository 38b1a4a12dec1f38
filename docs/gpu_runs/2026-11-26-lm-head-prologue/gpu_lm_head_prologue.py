"""Driver (an experiment for the LM head's fused op): the weight and input gradients of a chunk
of logits computed by GEMMs that form the softmax gradient in their A operand's prologue, from
the logits and each row's log-sum-exp, against today's op (the row kernel writes the gradient
over the logits, then cuBLAS computes dW = G^T x and dx = G W). The prologue form reads the
logits once per column tile of the output instead of writing and reading G; its row pass only
reads (log-sum-exp and loss). Checked against today's op, timed beside it. Prints a table;
writes $OUT/gpu_lm_head_prologue.json.

    OUT=/tmp/out PYTHONPATH=.:docs/gpu_runs/common python docs/gpu_runs/2026-11-26-lm-head-prologue/gpu_lm_head_prologue.py [--rows 4096]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import triton
import triton.language as tl
from grouped_order import grouped_tile
from scripts_common import median_ms

from kernelpro_backend.ops.linear_ce_rows import cross_entropy_rows


@triton.jit
def _grad_tile(logits, lse, target, scale, rt, rv, V: tl.constexpr, TRANSPOSED: tl.constexpr):
    """The softmax gradient (exp(l - lse) - onehot) * scale of rows `rt` and columns `rv`, in
    float32: [BLOCK_V, BLOCK_T] when TRANSPOSED (dW's A operand), else [BLOCK_T, BLOCK_V]."""
    s = tl.load(lse + rt)  # +inf on ignored rows: their gradient is 0
    tg = tl.load(target + rt)
    if TRANSPOSED:
        lg = tl.load(
            logits + rt[None, :].to(tl.int64) * V + rv[:, None], mask=rv[:, None] < V, other=0.0
        )
        g = tl.exp(lg.to(tl.float32) - s[None, :]) - tl.where(rv[:, None] == tg[None, :], 1.0, 0.0)
        g = tl.where(s[None, :] < float("inf"), g * scale, 0.0)
    else:
        lg = tl.load(
            logits + rt[:, None].to(tl.int64) * V + rv[None, :], mask=rv[None, :] < V, other=0.0
        )
        g = tl.exp(lg.to(tl.float32) - s[:, None]) - tl.where(rv[None, :] == tg[:, None], 1.0, 0.0)
        g = tl.where((s[:, None] < float("inf")) & (rv[None, :] < V), g * scale, 0.0)
    return g


@triton.jit
def dw_prologue(logits, lse, target, x, dw, scale, T: tl.constexpr, V: tl.constexpr,
                H: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_H: tl.constexpr,
                BLOCK_T: tl.constexpr, GROUP_M: tl.constexpr):  # fmt: skip
    pid_v, pid_h = grouped_tile(tl.program_id(0), V, H, BLOCK_V, BLOCK_H, GROUP_M)
    rv = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
    rh = tl.max_contiguous(
        tl.multiple_of(pid_h * BLOCK_H + tl.arange(0, BLOCK_H), BLOCK_H), BLOCK_H
    )
    acc = tl.zeros((BLOCK_V, BLOCK_H), dtype=tl.float32)
    for t0 in range(0, T, BLOCK_T):
        rt = t0 + tl.arange(0, BLOCK_T)
        g = _grad_tile(logits, lse, target, scale, rt, rv, V, True)
        xb = tl.load(x + rt[:, None].to(tl.int64) * H + rh[None, :])
        acc = tl.dot(g.to(xb.dtype), xb, acc)  # bf16 as the op's gradient (fp32 in tests)
    tl.store(
        dw + rv[:, None].to(tl.int64) * H + rh[None, :], acc.to(tl.bfloat16), mask=rv[:, None] < V
    )


@triton.jit
def dx_prologue(logits, lse, target, w, dx, scale, T: tl.constexpr, V: tl.constexpr,
                H: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr,
                BLOCK_V: tl.constexpr, GROUP_M: tl.constexpr):  # fmt: skip
    pid_t, pid_h = grouped_tile(tl.program_id(0), T, H, BLOCK_T, BLOCK_H, GROUP_M)
    rt = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    rh = tl.max_contiguous(
        tl.multiple_of(pid_h * BLOCK_H + tl.arange(0, BLOCK_H), BLOCK_H), BLOCK_H
    )
    acc = tl.zeros((BLOCK_T, BLOCK_H), dtype=tl.float32)
    for v0 in range(0, V, BLOCK_V):
        rv = v0 + tl.arange(0, BLOCK_V)
        g = _grad_tile(logits, lse, target, scale, rt, rv, V, False)
        wb = tl.load(
            w + rv[:, None].to(tl.int64) * H + rh[None, :], mask=rv[:, None] < V, other=0.0
        )
        acc = tl.dot(g.to(wb.dtype), wb, acc)
    tl.store(dx + rt[:, None].to(tl.int64) * H + rh[None, :], acc.to(dx.dtype.element_ty))


DW_TILES = (
    (128, 256, 64, 3, 8),
    (128, 128, 64, 3, 8),
    (128, 256, 32, 4, 8),
    (64, 256, 64, 3, 4),
    (128, 128, 64, 4, 4),
)
DX_TILES = ((128, 256, 64, 3, 8), (128, 128, 64, 3, 8), (64, 256, 64, 3, 4), (128, 128, 64, 4, 4))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=4096, help="tokens in the chunk")
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=32000)
    a = p.parse_args(argv)
    t_rows, h, v = a.rows, a.hidden, a.vocab
    torch.manual_seed(0)
    dev = "cuda"
    x = torch.randn(t_rows, h, device=dev, dtype=torch.bfloat16)
    w = (torch.randn(v, h, device=dev) / h**0.5).bfloat16()
    target = torch.randint(0, v, (t_rows,), device=dev)
    target[::97] = -100  # some ignored rows
    scale = 1.0 / t_rows
    logits = torch.nn.functional.linear(x, w)

    def today() -> tuple[torch.Tensor, torch.Tensor]:  # the op's chunk after its logits GEMM
        g = logits.clone()
        cross_entropy_rows(g, target, scale, -100, True)
        return g.t() @ x, g @ w

    def lse_pass() -> torch.Tensor:  # the row kernel without gradients, then lse per row
        loss = cross_entropy_rows(logits, target, scale, -100, False)
        valid = target != -100
        picked = logits.gather(1, torch.where(valid, target, 0)[:, None])[:, 0].float()
        return torch.where(valid, loss + picked, float("inf"))

    ref_dw, ref_dx = today()
    lse = lse_pass()
    out: dict = {"rows": t_rows, "hidden": h, "vocab": v, "device": torch.cuda.get_device_name()}
    copy = logits.clone()
    out["clone_ms"] = median_ms(lambda: copy.copy_(logits))  # today()'s clone, taken off below
    out["today_ms"] = median_ms(today) - out["clone_ms"]
    out["today_rows_ms"] = median_ms(lambda: cross_entropy_rows(copy, target, scale, -100, True))
    out["cublas_dw_ms"] = median_ms(lambda: ref_dw.copy_(copy.t() @ x))
    out["cublas_dx_ms"] = median_ms(lambda: ref_dx.copy_(copy @ w))
    out["lse_pass_ms"] = median_ms(lse_pass)
    out["dw"], out["dx"] = [], []
    for name, tiles, ref in (("dw", DW_TILES, ref_dw), ("dx", DX_TILES, ref_dx)):
        for bm, bn, bk, stages, warps in tiles:
            res = torch.empty_like(ref)
            entry: dict = {"tile": [bm, bn, bk, stages, warps]}
            out[name].append(entry)
            if name == "dw":
                grid = (triton.cdiv(v, bm) * triton.cdiv(h, bn),)
                args = (logits, lse, target, x, res, scale, t_rows, v, h, bm, bn, bk, 8)
                kernel = dw_prologue
            else:
                grid = (triton.cdiv(t_rows, bm) * triton.cdiv(h, bn),)
                args = (logits, lse, target, w, res, scale, t_rows, v, h, bm, bn, bk, 8)
                kernel = dx_prologue

            def call(kernel=kernel, grid=grid, args=args, stages=stages, warps=warps):
                kernel[grid](*args, num_stages=stages, num_warps=warps)

            try:
                call()
                err = float((res.float() - ref.float()).abs().max())
                entry["rel_error"] = err / float(ref.float().abs().max())
                entry["ms"] = median_ms(call)
            except Exception as e:
                entry["failed"] = f"{type(e).__name__}: {e}"[:200]
    with open(os.path.join(os.environ.get("OUT", "."), "gpu_lm_head_prologue.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(f"{t_rows} x {h} -> {v} bf16, {out['device']}")
    print(f"  today: row kernel with gradient {out['today_rows_ms']:.4f} + cuBLAS dW {out['cublas_dw_ms']:.4f}"
          f" + dx {out['cublas_dx_ms']:.4f}; all three {out['today_ms']:.4f} ms")  # fmt: skip
    print(f"  prologue form: row pass without gradient (+ lse) {out['lse_pass_ms']:.4f} ms, then")
    for name in ("dw", "dx"):
        for e in out[name]:
            t = "x".join(map(str, e["tile"][:3])) + f" s{e['tile'][3]} w{e['tile'][4]}"
            got = e.get("failed") or f"{e['ms']:.4f} ms  rel error {e['rel_error']:.1e}"
            print(f"    {name} {t:18s} {got}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
