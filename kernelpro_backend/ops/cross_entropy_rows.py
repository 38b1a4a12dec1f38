"""Cross-entropy over logits a model keeps: the forward's per-row log-sum-exp and loss, and the
backward's gradient of the logits written in their own dtype — two row kernels that never make
a float32 copy of the [rows, vocab] logits and never write a log-softmax.

Unlike linear_ce_rows.py (whose kernel overwrites a chunk of logits the op made itself with
their gradient), these leave the logits alone: the model returned them. The forward reads each
row once (online log-sum-exp, float32, one exp per element as there) and writes two floats per
row; the backward reads each row once more with its saved log-sum-exp and writes
`(exp(x - lse) - [col == target]) * scale` rounded once to the logits' dtype, where `scale`
(the loss's gradient, over the targets counted for a mean) is read from device memory: no
device-to-host wait.

Owns: `forward_rows(logits, target, ignore_index) -> (loss per row, lse per row)` and
`backward_rows(logits, target, lse, grad_loss, factor, pre, ignore_index) -> grad`, each a
Triton kernel on CUDA tensors (and under TRITON_INTERPRET=1) and ATen chunked over rows
otherwise (made on first use, per interpreter mode, as linear_ce_rows.py's).
Must not: reduce the per-row losses (linear_ce_rows.finish does) or decide when it runs.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch

# Columns per step of a row (see _warps): the backward's is linear_ce_rows.py's choice for
# 32k-128k columns of bf16 on an H100, the forward's measured for this kernel.
BLOCK, FORWARD_BLOCK = 4096, 2048
# Rows per chunk of the ATen path: a float32 copy of at most 2**24 logits (64 MiB) at a time.
ATEN_CHUNK_ELEMENTS = 2**24


def _triton(logits: torch.Tensor) -> bool:
    return logits.is_cuda or os.environ.get("TRITON_INTERPRET") == "1"


@functools.lru_cache(maxsize=2)
def _kernels(interpret: bool) -> tuple[Any, Any]:
    import triton
    import triton.language as tl

    @triton.jit
    def ce_forward(
        logits, stride, target, loss, lse_out, n_cols, ignore_index, BLOCK: tl.constexpr
    ):
        row = tl.program_id(0).to(tl.int64)
        base = logits + row * stride
        t = tl.load(target + row)
        cols = tl.arange(0, BLOCK)
        # Online log-sum-exp with one exp per element (linear_ce_rows.py says why).
        m = tl.full([BLOCK], -3.4028234663852886e38, tl.float32)
        s = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_cols, BLOCK):
            x = tl.load(base + start + cols, mask=start + cols < n_cols, other=float("-inf"))
            d = x.to(tl.float32) - m
            e = tl.exp(-tl.abs(d))
            up = d > 0
            s = tl.where(up, s * e + 1.0, s + e)
            m = tl.where(up, x.to(tl.float32), m)
        row_max = tl.max(m, 0)
        lse = row_max + tl.log(
            tl.sum(s * tl.where(m == float("-inf"), 0.0, tl.exp(m - row_max)), 0)
        )
        valid = t != ignore_index
        picked = tl.load(base + tl.where(valid, t, 0)).to(tl.float32)
        tl.store(loss + row, tl.where(valid, lse - picked, 0.0))
        tl.store(lse_out + row, lse)

    @triton.jit
    def ce_backward(
        logits, stride, grad, target, lse_in, grad_loss, factor, pre, n_cols, ignore_index,
        BLOCK: tl.constexpr,
    ):  # fmt: skip
        row = tl.program_id(0).to(tl.int64)
        base = logits + row * stride
        out = grad + row * n_cols
        t = tl.load(target + row)
        lse = tl.load(lse_in + row)
        valid = t != ignore_index
        k = tl.load(grad_loss).to(tl.float32) * tl.load(factor) * pre
        k = tl.where(valid, k, 0.0)
        cols = tl.arange(0, BLOCK)
        for start in range(0, n_cols, BLOCK):
            c = start + cols
            mask = c < n_cols
            x = tl.load(base + c, mask=mask, other=0.0).to(tl.float32)
            g = (tl.exp(x - lse) - tl.where(c == t, 1.0, 0.0)) * k
            tl.store(out + c, g.to(grad.dtype.element_ty), mask=mask)

    del interpret  # the cache key: the kernels are made again when the mode changes
    return ce_forward, ce_backward


def _warps(cols: int, forward: bool = False) -> tuple[int, int]:
    """(columns per step, warps) of a row kernel. The forward steps 2048 columns with 8 warps:
    on one H100 (2026-12-06, docs/gpu_runs/2026-12-06-ce-rows-tiles/) it was the fastest of 12
    configs at every shape timed (8192 rows x 32000-128256 columns, 2048 x 50257), 4-9% under
    4096 and 16 warps; the backward's best varied by shape within 3% of 4096 and 16 warps."""
    block = min(FORWARD_BLOCK if forward else BLOCK, 1 << max(cols - 1, 1).bit_length())
    return block, 16 if block >= 4096 else 8 if block >= 2048 else 4


def _chunks(logits: torch.Tensor) -> range:
    rows, cols = logits.shape
    return range(0, rows, max(1, ATEN_CHUNK_ELEMENTS // max(cols, 1)))


def forward_rows(
    logits: torch.Tensor, target: torch.Tensor, ignore_index: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss per row, log-sum-exp per row), both float32, of `logits` [rows, vocab] (unit
    column stride) against `target` [rows]; an ignored row's loss is 0."""
    rows, cols = logits.shape
    loss = torch.empty(rows, dtype=torch.float32, device=logits.device)
    lse = torch.empty(rows, dtype=torch.float32, device=logits.device)
    if not _triton(logits):
        step = _chunks(logits).step
        for start in _chunks(logits):
            x, t = logits[start : start + step].float(), target[start : start + step]
            valid = t != ignore_index
            lse[start : start + step] = torch.logsumexp(x, dim=-1)
            picked = x.gather(1, torch.where(valid, t, 0).unsqueeze(1)).squeeze(1)
            loss[start : start + step] = torch.where(valid, lse[start : start + step] - picked, 0.0)
        return loss, lse
    if rows:
        block, warps = _warps(cols, forward=True)
        _kernels(os.environ.get("TRITON_INTERPRET") == "1")[0][(rows,)](
            logits, logits.stride(0), target, loss, lse, cols, ignore_index, block,
            num_warps=warps,
        )  # fmt: skip
    return loss, lse


def backward_rows(
    logits: torch.Tensor,
    target: torch.Tensor,
    lse: torch.Tensor,
    grad_loss: torch.Tensor,
    factor: torch.Tensor,
    pre: float,
    ignore_index: int,
) -> torch.Tensor:
    """The gradient of the loss w.r.t. `logits`, a new contiguous tensor of their dtype:
    `(softmax - one-hot) * grad_loss * factor * pre` per row counted, 0 on an ignored row.
    `factor` (0-d float32) and `pre` (a host float) are the op's: rows / targets counted and
    1 / rows for a mean, 1 and 1 for a sum."""
    rows, cols = logits.shape
    grad = torch.empty((rows, cols), dtype=logits.dtype, device=logits.device)
    if not _triton(logits):
        k = grad_loss.float() * factor * pre
        step = _chunks(logits).step
        for start in _chunks(logits):
            x, t = logits[start : start + step].float(), target[start : start + step]
            valid = t != ignore_index
            g = torch.exp(x - lse[start : start + step].unsqueeze(1))
            g.scatter_add_(1, torch.where(valid, t, 0).unsqueeze(1), -torch.ones_like(x[:, :1]))
            g *= (valid.float() * k).unsqueeze(1)
            grad[start : start + step] = g
        return grad
    if rows:
        block, warps = _warps(cols)
        _kernels(os.environ.get("TRITON_INTERPRET") == "1")[1][(rows,)](
            logits, logits.stride(0), grad, target, lse, grad_loss, factor, float(pre), cols,
            ignore_index, block, num_warps=warps,
        )  # fmt: skip
    return grad
