"""Cross-entropy over a chunk of logit rows in one kernel: the loss per row and, in place, the
gradient of the logits.

One Triton program per row: a first pass keeps the running max and sum of exp (online
log-sum-exp, float32; the row marked to stay in L2 when the second pass reads it again), the
loss is `lse - logit[target]` (0 for an ignored target), and a second pass overwrites each logit with `(exp(logit - lse) - [col == target]) * scale` in the logits'
own dtype — so a chunk of bf16 logits becomes its bf16 gradient without a float32 copy of it.
`scale` is read from a device scalar (1 / number of targets not ignored, for a mean), so no host
synchronisation is needed. `rows_aten` is the same contract in ATen ops, for CPU tensors.

Owns: `cross_entropy_rows(logits, target, scale, ignore_index, grads) -> per-row loss`, the
Triton kernel (made on first use, per interpreter mode: TRITON_INTERPRET is read when a JIT
function is created) and its ATen twin.
Must not: compute the logits or the weight gradients (linear_ce_op.py does).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch

# Columns per step of a row, 16 warps: on an H100 the fastest of BLOCK 1024-8192 x 4-16 warps
# and of a row held whole in registers (up to 64k columns) for bf16 chunks of 32000-128256
# columns (2.2 TB/s vs 1.8; scripts/gpu_ce_rows_configs.py, BENCHMARKS.md).
BLOCK = 4096
# With the gradient, the second pass reads the row again: kept in L2 after the first pass
# (evict_last) and let go after the second (evict_first), as Inductor marks such loads; the row
# template's measured gain from these hints: BENCHMARKS.md, rows, "Re-read rows".
REREAD_HINTS = ("evict_last", "evict_first")


@functools.lru_cache(maxsize=2)
def _kernel(interpret: bool) -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def ce_rows(
        logits, stride, target, loss, scale, n_cols, ignore_index, GRADS: tl.constexpr,
        BLOCK: tl.constexpr, FIRST: tl.constexpr = "", LAST: tl.constexpr = "",
    ):  # fmt: skip
        row = tl.program_id(0).to(tl.int64)
        base = logits + row * stride
        t = tl.load(target + row)
        cols = tl.arange(0, BLOCK)
        m = tl.full([BLOCK], float("-inf"), tl.float32)
        s = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_cols, BLOCK):
            x = tl.load(
                base + start + cols, mask=start + cols < n_cols, other=float("-inf"),
                eviction_policy=FIRST,
            ).to(tl.float32)  # fmt: skip
            new_m = tl.maximum(m, x)
            alpha = tl.where(new_m == float("-inf"), 0.0, tl.exp(m - new_m))
            s = s * alpha + tl.where(x == float("-inf"), 0.0, tl.exp(x - new_m))
            m = new_m
        row_max = tl.max(m, 0)
        total = tl.sum(s * tl.where(m == float("-inf"), 0.0, tl.exp(m - row_max)), 0)
        lse = row_max + tl.log(total)
        valid = t != ignore_index
        safe = tl.where(valid, t, 0)
        picked = tl.load(base + safe).to(tl.float32)
        tl.store(loss + row, tl.where(valid, lse - picked, 0.0))
        if GRADS:
            k = tl.where(valid, tl.load(scale), 0.0)
            for start in range(0, n_cols, BLOCK):
                mask = start + cols < n_cols
                x = tl.load(base + start + cols, mask=mask, other=0.0, eviction_policy=LAST).to(
                    tl.float32
                )
                g = tl.exp(x - lse) - tl.where(start + cols == safe, 1.0, 0.0)
                tl.store(base + start + cols, (g * k).to(logits.dtype.element_ty), mask=mask)

    del interpret  # the cache key: the kernel is made again when the mode changes
    return ce_rows


def cross_entropy_rows(
    logits: torch.Tensor, target: torch.Tensor, scale: torch.Tensor, ignore_index: int, grads: bool
) -> torch.Tensor:
    """Per-row loss (float32) of `logits` [rows, vocab] (rows contiguous) against `target`; with
    `grads`, `logits` is overwritten with the loss's gradient times `scale` (a float32 scalar
    tensor). Triton on CUDA tensors (and under TRITON_INTERPRET=1), ATen otherwise."""
    if not logits.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        return rows_aten(logits, target, scale, ignore_index, grads)
    rows, cols = logits.shape
    loss = torch.empty(rows, dtype=torch.float32, device=logits.device)
    if rows:
        kernel = _kernel(os.environ.get("TRITON_INTERPRET") == "1")
        block = min(BLOCK, 1 << max(cols - 1, 1).bit_length())
        kernel[(rows,)](
            logits, logits.stride(0), target, loss, scale, cols, ignore_index, grads, block,
            *(REREAD_HINTS if grads else ("", "")),
            num_warps=16 if block >= 4096 else 8 if block >= 2048 else 4,
        )  # fmt: skip
    return loss


def rows_aten(
    logits: torch.Tensor, target: torch.Tensor, scale: torch.Tensor, ignore_index: int, grads: bool
) -> torch.Tensor:
    """`cross_entropy_rows` in ATen ops (a float32 copy of the chunk; for CPU tensors)."""
    x = logits.float()
    valid = target != ignore_index
    safe = torch.where(valid, target, 0)
    lse = torch.logsumexp(x, dim=-1)
    loss = torch.where(valid, lse - x.gather(1, safe.unsqueeze(1)).squeeze(1), 0.0)
    if grads:
        g = torch.softmax(x, dim=-1)
        g.scatter_add_(1, safe.unsqueeze(1), -torch.ones_like(lse).unsqueeze(1))
        g *= (valid.float() * scale).unsqueeze(1)
        logits.copy_(g)
    return loss
