"""Cross-entropy on logits the model also returns, forward and backward in one pass each.

`kernelpro::cross_entropy(logits, target, ignore_index, reduction, out_dtype)` is
`F.cross_entropy(logits.float(), target, ...)` for [rows, vocab] logits of any float dtype
(bf16 under autocast): the forward reads the logits once and saves only the float32
log-sum-exp per row; the backward writes the logits' gradient (softmax - one-hot, scaled) once,
in the logits' dtype (cross_entropy_rows.py). PyTorch's unfused chain writes a float32 copy of
the logits, a float32 log-softmax (saved for the backward) and, in the backward, a float32
gradient and its bf16 cast: at 8k tokens and vocabulary 32k, four [tokens, vocab] tensors more.
The LM head's GEMM stays in the graph (the logits are returned, so they are written anyway).

Numerics are those of the upcast loss: every row is computed in float32 from the logits as
stored; `out_dtype` is the dtype of the loss the graph had (float32 after `.float()` or under
autocast, whose cross-entropy runs in float32; else the logits' dtype). The mean is over the
targets not ignored (nan when none is, with zero gradients, as PyTorch).

Owns: the op, its fake implementation, its autograd formula (the backward op
`kernelpro::cross_entropy_backward`, which has none) and the op's twin without an autograd
kernel (`cross_entropy_inner`) for graphs AOTAutograd has differentiated
(fx_passes.linear_ce_rewrite.drop_autograd_kernel).
Must not: match graphs (fx_passes/linear_ce_rewrite.py does) or hold kernels
(cross_entropy_rows.py does).
"""

from __future__ import annotations

import torch

from .cross_entropy_rows import backward_rows, forward_rows
from .fast_op import fast_op
from .linear_ce_rows import finish


def _pre(rows: int, reduction: str) -> float:
    """The host part of a row's gradient scale: 1 / rows for a mean (the op's `factor`, rows /
    targets counted, carries the rest), 1 for a sum."""
    return 1.0 / max(rows, 1) if reduction == "mean" else 1.0


@fast_op("kernelpro::cross_entropy")
def cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    ignore_index: int,
    reduction: str,
    out_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss in `out_dtype`, log-sum-exp per row (float32), factor): `factor` is rows /
    targets counted for a mean, 1 for a sum (what the backward scales by)."""
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    losses, lse = forward_rows(logits, target, ignore_index)
    loss, factor = finish(losses, target, ignore_index, reduction == "mean", out_dtype)
    return loss, lse, factor


@cross_entropy.register_fake
def _fake(logits, target, ignore_index, reduction, out_dtype):  # type: ignore[no-untyped-def]
    return (
        logits.new_empty((), dtype=out_dtype),
        logits.new_empty(logits.shape[0], dtype=torch.float32),
        logits.new_empty((), dtype=torch.float32),
    )


@fast_op("kernelpro::cross_entropy_backward")
def cross_entropy_backward(
    grad_loss: torch.Tensor,
    logits: torch.Tensor,
    target: torch.Tensor,
    lse: torch.Tensor,
    factor: torch.Tensor,
    ignore_index: int,
    reduction: str,
) -> torch.Tensor:
    """The gradient of `cross_entropy`'s loss w.r.t. its logits, given the loss's gradient."""
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    pre = _pre(logits.shape[0], reduction)
    return backward_rows(logits, target, lse, grad_loss, factor, pre, ignore_index)


@cross_entropy_backward.register_fake
def _fake_backward(grad_loss, logits, target, lse, factor, ignore_index, reduction):  # type: ignore[no-untyped-def]
    return logits.new_empty(logits.shape)


def _setup(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    logits, target, ignore_index, reduction, _ = inputs
    _, lse, factor = output
    ctx.ignore_index, ctx.reduction = ignore_index, reduction
    ctx.save_for_backward(logits, target, lse, factor)


def _backward(ctx, grad_loss, _lse, _factor):  # type: ignore[no-untyped-def]
    logits, target, lse, factor = ctx.saved_tensors
    grad = torch.ops.kernelpro.cross_entropy_backward(
        grad_loss, logits, target, lse, factor, ctx.ignore_index, ctx.reduction
    )
    return grad, None, None, None, None


cross_entropy.register_autograd(_backward, setup_context=_setup)

# Twins without an autograd kernel, for graphs AOTAutograd has already differentiated (see
# linear_ce.py: the autograd kernel's Python runs per call even with grad mode off).
cross_entropy_inner = fast_op("kernelpro::cross_entropy_inner")(cross_entropy._init_fn)
cross_entropy_inner.register_fake(_fake)
