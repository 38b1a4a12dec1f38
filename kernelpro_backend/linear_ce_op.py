"""An LM head and its cross-entropy in chunks of tokens: the [tokens, vocab] logits never exist.

`kernelpro::linear_cross_entropy(x, weight, bias, target, ...)` computes, chunk by chunk of
rows, the logits `x_c @ weight.T + bias` (one GEMM), then in one row kernel their log-sum-exp
and loss and — when gradients are wanted — the gradient of the logits (softmax - one-hot,
scaled by the reduction) written over them in place (linear_ce_rows.py), and from it dx_c and
the accumulated dweight/dbias (two GEMMs): the forward returns the loss and those
gradients, and the backward only scales them by the loss's gradient (the chunked
linear+cross-entropy of Liger-Kernel). Peak memory drops from a few [tokens, vocab] tensors to
one chunk; the GEMM flops are those of the unfused forward and backward.

Numerics follow the unfused graph: logits are rounded to the input dtype (as a bf16 GEMM's
output is) and, with `upcast` (the model called `.float()` on them), the loss is computed in
float32 from those rounded values; without it, in float32 too (PyTorch's cross-entropy
accumulates in float32 on bf16 inputs), rounded to the input dtype at the end.

Owns: the custom op, its fake (shape) implementation and its autograd formula.
Must not: match graphs (fx_passes/linear_ce_rewrite.py does).
"""

from __future__ import annotations

import torch

from .linear_ce_rows import cross_entropy_rows

# Rows per chunk: about 2**27 logits (256 MiB in bf16) at a time. On the H100 (8192 x 1024 ->
# 32000 bf16, BENCHMARKS.md "The LM head in one chunk") 2**26 / 2**27 / 2**28 logits a chunk
# took 3.319 / 2.934 / 3.010 ms a step: fewer GEMM launches of a useful size win until one
# chunk holds every logit (Inductor's peak memory, 500 MiB there).
CHUNK_ELEMENTS = 2**27


def chunk_rows(rows: int, vocab: int) -> int:
    return max(1, min(rows, CHUNK_ELEMENTS // max(vocab, 1)))


@torch.library.custom_op("kernelpro::linear_cross_entropy", mutates_args=())
def linear_cross_entropy(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    target: torch.Tensor,
    ignore_index: int,
    reduction: str,
    upcast: bool,
    grads: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, dloss/dx, dloss/dweight, dloss/dbias); the gradients are empty without `grads`."""
    rows = x.shape[0]
    step = chunk_rows(rows, weight.shape[0])
    # The first chunk's GEMM is launched before the small set-up kernels, so that the GPU
    # works while the host launches them instead of waiting on each (measured: ~0.5 ms of a
    # 3.5 ms step idle on an H100 with the set-up first).
    logits = _logits(x[:step], weight, bias)
    scale, total, gx, gw, gb = _buffers(x, weight, bias, target, ignore_index, reduction, grads)
    for start in range(0, rows, step):
        xc, tc = x[start : start + step], target[start : start + step]
        if start:
            logits = _logits(xc, weight, bias)
        # The loss per row, and the logits overwritten by their gradient (times the scale).
        total += cross_entropy_rows(logits, tc, scale, ignore_index, grads).sum()
        if grads:
            torch.matmul(logits, weight, out=gx[start : start + step])
            if start == 0:  # dW: the first chunk's GEMM writes it, the others accumulate
                torch.matmul(logits.t(), xc, out=gw)
            else:
                gw.addmm_(logits.t(), xc)
            if gb is not None:
                gb += logits.sum(0, dtype=torch.float32)
    if grads and rows == 0:
        gw.zero_()
    loss = total * scale if reduction == "mean" else total
    return (  # a fresh empty tensor per gradient not computed: outputs may not alias
        loss if upcast else loss.to(x.dtype),
        gx,
        gw,
        gb.to(bias.dtype) if gb is not None and bias is not None else x.new_empty(0),
    )


def _logits(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.nn.functional.linear(x, weight, bias).contiguous()


def _buffers(x, weight, bias, target, ignore_index, reduction, grads):  # type: ignore[no-untyped-def]
    """(scale, loss total, dx, dW, db) of the op: dW in the weight's dtype (addmm accumulates in
    float32 inside each GEMM), db in float32."""
    # Like PyTorch's mean: over the targets not ignored (0/0 = nan when all are). A device
    # scalar: the row kernel reads it, nothing waits for the host.
    if reduction == "mean":
        scale = (target != ignore_index).sum(dtype=torch.float32).reciprocal()
    else:
        scale = torch.ones((), device=x.device)
    total = torch.zeros((), dtype=torch.float32, device=x.device)
    gx = torch.empty_like(x) if grads else x.new_empty(0)
    gw = torch.empty_like(weight) if grads else x.new_empty(0)
    gb = None
    if grads and bias is not None:
        gb = torch.zeros(weight.shape[0], dtype=torch.float32, device=x.device)
    return scale, total, gx, gw, gb


@linear_cross_entropy.register_fake
def _fake(x, weight, bias, target, ignore_index, reduction, upcast, grads):  # type: ignore[no-untyped-def]
    loss = x.new_empty((), dtype=torch.float32 if upcast else x.dtype)
    gx = torch.empty_like(x) if grads else x.new_empty(0)
    gw = torch.empty_like(weight) if grads else x.new_empty(0)
    gb = torch.empty_like(bias) if grads and bias is not None else x.new_empty(0)
    return loss, gx, gw, gb


def _setup(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    _, gx, gw, gb = output
    ctx.has_bias = inputs[2] is not None
    ctx.save_for_backward(gx, gw, gb)


def _backward(ctx, grad_loss, _gx, _gw, _gb):  # type: ignore[no-untyped-def]
    gx, gw, gb = ctx.saved_tensors
    if gx.numel() == 0 and gw.numel() == 0:
        raise RuntimeError(
            "kernelpro::linear_cross_entropy ran without gradients (grads=False) and is being "
            "differentiated; recompile with grad mode on"
        )
    # A float32 0-d factor times a bf16/fp16 tensor: one kernel, computed in float32 and rounded
    # once to the tensor's dtype (a 0-d tensor does not promote a dimensioned one).
    g = grad_loss.float()
    return (
        gx * g,
        gw * g,
        gb * g if ctx.has_bias else None,
        None,
        None,
        None,
        None,
        None,
    )


linear_cross_entropy.register_autograd(_backward, setup_context=_setup)
