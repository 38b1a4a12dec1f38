"""Cross-entropy over a chunk of logit rows in one kernel: the loss per row and, in place, the
gradient of the logits.

One Triton program per row: a first pass keeps the running max and sum of exp (online
log-sum-exp, float32, one exp per element; the row marked to stay in L2 when the second pass
reads it again), the loss is `lse - logit[target]` (0 for an ignored target), and a second
pass overwrites each logit with `(exp(logit - lse) - [col == target]) * scale` in the logits'
own dtype — so a chunk of bf16 logits becomes its bf16 gradient without a float32 copy of it.
`scale` is a host float (the op passes 1 / rows for a mean and corrects by rows / targets
counted in its backward), so the kernel waits on no device scalar. `rows_aten` is the same
contract in ATen ops, for CPU tensors.

Where it can run (16-bit logits on sm_90 and later, rows on 16 bytes that fit in a block's
shared memory) the CUDA kernel of linear_ce_rows_cuda.py runs instead: the same contract, each
row read once into shared memory (at a copy's speed on an H100, where this kernel's second read
from L2 leaves it at 87%); elsewhere this one, with the reason logged once.

Owns: `cross_entropy_rows(logits, target, scale, ignore_index, grads) -> per-row loss` (which
kernel runs), the
Triton kernel (made on first use, per interpreter mode: TRITON_INTERPRET is read when a JIT
function is created) and its ATen twin; `finish` (the loss and the mean's factor from the
per-row losses, one kernel) and `Finish` (the same asked of the CUDA row kernel's last launch).
Must not: compute the logits or the weight gradients (linear_ce.py does).
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from typing import Any

import torch

from . import linear_ce_rows_cuda

log = logging.getLogger("kernelpro.ops")

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
        STORE: tl.constexpr = "",
    ):  # fmt: skip
        row = tl.program_id(0).to(tl.int64)
        base = logits + row * stride
        t = tl.load(target + row)
        cols = tl.arange(0, BLOCK)
        # Per lane a running max m and sum s of exp(x - m), with one exp per element:
        # exp(-|x - m|) is the new term when x <= m and the rescale of s when x > m (then x
        # itself adds exp(0) = 1); m starts at the lowest finite float so that x - m is never
        # inf - inf. (The textbook update takes two exps: 0.449 ms against 0.401 on an H100,
        # 8192 x 32000 bf16, BENCHMARKS.md.)
        m = tl.full([BLOCK], -3.4028234663852886e38, tl.float32)
        s = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_cols, BLOCK):
            x = tl.load(
                base + start + cols, mask=start + cols < n_cols, other=float("-inf"),
                eviction_policy=FIRST,
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
        if GRADS:
            k = tl.where(valid, scale, 0.0)
            for start in range(0, n_cols, BLOCK):
                mask = start + cols < n_cols
                x = tl.load(base + start + cols, mask=mask, other=0.0, eviction_policy=LAST).to(
                    tl.float32
                )
                g = tl.exp(x - lse) * k
                tl.store(
                    base + start + cols, g.to(logits.dtype.element_ty), mask=mask,
                    eviction_policy=STORE,
                )  # fmt: skip
            # The target's -1 once per row instead of a compare per element; the barrier
            # orders it after the loop's store of the same element by another thread.
            tl.debug_barrier()
            fixed = ((tl.exp(picked - lse) - 1.0) * k).to(logits.dtype.element_ty)
            tl.store(base + safe, fixed, mask=valid)

    del interpret  # the cache key: the kernel is made again when the mode changes
    return ce_rows


@functools.lru_cache(maxsize=2)
def _finish_kernel(interpret: bool) -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def ce_finish(
        losses, target, n_rows, ignore_index, loss, factor, MEAN: tl.constexpr,
        BLOCK: tl.constexpr,
    ):  # fmt: skip
        offs = tl.arange(0, BLOCK)
        acc = tl.zeros([BLOCK], tl.float32)
        counted = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_rows, BLOCK):
            inside = start + offs < n_rows
            acc += tl.load(losses + start + offs, mask=inside, other=0.0)
            if MEAN:
                t = tl.load(target + start + offs, mask=inside, other=ignore_index)
                counted += tl.where(t != ignore_index, 1.0, 0.0)
        total = tl.sum(acc, 0)
        if MEAN:  # PyTorch's mean: over the targets not ignored (0 / 0 = nan)
            c = tl.sum(counted, 0)
            tl.store(loss, tl.math.div_rn(total, c).to(loss.dtype.element_ty))
            tl.store(factor, tl.math.div_rn(n_rows.to(tl.float32), tl.maximum(c, 1.0)))
        else:
            tl.store(loss, total.to(loss.dtype.element_ty))
            tl.store(factor, 1.0)

    del interpret
    return ce_finish


def finish(
    losses: torch.Tensor, target: torch.Tensor, ignore_index: int, mean: bool, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss in `dtype`, factor) from the per-row losses: their sum, or for a mean their sum
    over the targets not ignored, and the factor rows / that count (1 for a sum, and with no
    target counted, where every gradient is 0 anyway) that turns gradients formed with
    1 / rows into the mean's. One kernel on CUDA instead of seven small ATen launches."""
    if not losses.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        total = losses.sum()
        if not mean:
            return total.to(dtype), torch.ones((), device=losses.device)
        count = (target != ignore_index).sum(dtype=torch.float32)
        return (total / count).to(dtype), losses.shape[0] / count.clamp_min(1.0)
    loss = losses.new_empty((), dtype=dtype)
    factor = losses.new_empty((), dtype=torch.float32)
    kernel = _finish_kernel(os.environ.get("TRITON_INTERPRET") == "1")
    block = min(4096, max(16, 1 << max(losses.shape[0] - 1, 1).bit_length()))
    kernel[(1,)](
        losses, target, losses.shape[0], ignore_index, loss, factor, mean, block,
        num_warps=8 if block >= 2048 else 4,
    )  # fmt: skip
    return loss, factor


@dataclass
class Finish:
    """What `finish` computes, asked of the row kernel that takes the last chunk of rows: the
    loss (0-d, into `loss`) and the mean's factor (0-d float32, into `factor`) from every row's
    loss in `losses` and every target. `done` is set when that kernel did it (the CUDA kernel
    can: its last block to end sums the rows, saving a launch); else the caller runs `finish`."""

    losses: torch.Tensor
    target: torch.Tensor
    mean: bool
    loss: torch.Tensor
    factor: torch.Tensor
    done: bool = False


def cross_entropy_rows(
    logits: torch.Tensor,
    target: torch.Tensor,
    scale: float,
    ignore_index: int,
    grads: bool,
    out: torch.Tensor | None = None,
    then: Finish | None = None,
) -> torch.Tensor:
    """Per-row loss (float32, into `out` when given) of `logits` [rows, vocab] (rows
    contiguous) against `target`; with `grads`, `logits` is overwritten with the loss's gradient
    times `scale` (a host float: the kernel waits for no device scalar). Triton on CUDA tensors
    (and under TRITON_INTERPRET=1), ATen otherwise. With `then`, the kernel may also finish the
    loss (`then.done` says so)."""
    if not logits.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        loss = rows_aten(logits, target, scale, ignore_index, grads)
        return loss if out is None else out.copy_(loss)
    rows, cols = logits.shape
    loss = torch.empty(rows, dtype=torch.float32, device=logits.device) if out is None else out
    if rows and _shared_memory_kernel(logits, target, loss, scale, ignore_index, grads, then):
        return loss
    if rows:
        kernel = _kernel(os.environ.get("TRITON_INTERPRET") == "1")
        block = min(BLOCK, 1 << max(cols - 1, 1).bit_length())
        # Rows that do not start on 16 bytes (a vocabulary like GPT-2's 50257) load element by
        # element: 32 warps and no hints there (H100, 1337 x 50257 bf16: 0.147 ms against
        # 0.224 with the aligned rows' 16 warps and hints; BENCHMARKS.md, "one exp").
        aligned = (logits.stride(0) * logits.element_size()) % 16 == 0
        warps = 16 if block >= 4096 else 8 if block >= 2048 else 4
        kernel[(rows,)](
            logits, logits.stride(0), target, loss, float(scale), cols, ignore_index, grads,
            block, *(REREAD_HINTS if grads and aligned else ("", "")),
            num_warps=warps if aligned or block < 4096 else 32,
        )  # fmt: skip
    return loss


_SEEN: set[str] = set()


def _shared_memory_kernel(
    logits: torch.Tensor,
    target: torch.Tensor,
    loss: torch.Tensor,
    scale: float,
    ignore_index: int,
    grads: bool,
    then: Finish | None,
) -> bool:
    """The CUDA kernel with the row in shared memory where it runs (linear_ce_rows_cuda.py);
    False, with the reason logged once, where the Triton kernel runs instead."""
    reason = linear_ce_rows_cuda.unavailable(logits, target, loss)
    if reason is None:
        return linear_ce_rows_cuda.run(logits, target, loss, scale, ignore_index, grads, then)
    if reason not in _SEEN and logits.is_cuda:
        _SEEN.add(reason)
        log.info("cross-entropy rows: the Triton kernel runs (%s)", reason)
    return False


def rows_aten(
    logits: torch.Tensor, target: torch.Tensor, scale: float, ignore_index: int, grads: bool
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
