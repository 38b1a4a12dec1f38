"""An LM head and its cross-entropy in chunks of tokens: the [tokens, vocab] logits never exist.

`kernelpro::linear_cross_entropy(x, weight, bias, target, ...)` computes, chunk by chunk of
rows, the logits `x_c @ weight.T + bias`, their log-sum-exp and the loss, and — when gradients
are wanted — at once the gradient of the logits (softmax - one-hot, scaled by the reduction)
and from it dx_c and the accumulated dweight/dbias: the forward returns the loss and those
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

# Rows per chunk: about 2**26 float32 logits (256 MiB) at a time.
CHUNK_ELEMENTS = 2**26


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
    rows, vocab = x.shape[0], weight.shape[0]
    valid = target != ignore_index
    # Like PyTorch's mean: over the targets not ignored (0/0 = nan when all are).
    scale = 1.0 / valid.sum().to(torch.float32) if reduction == "mean" else None
    total = torch.zeros((), dtype=torch.float32, device=x.device)
    gx = torch.empty_like(x) if grads else x.new_empty(0)
    gw = torch.zeros(weight.shape, dtype=torch.float32, device=x.device) if grads else None
    gb = (
        torch.zeros(vocab, dtype=torch.float32, device=x.device)
        if grads and bias is not None
        else None
    )
    step = chunk_rows(rows, vocab)
    for start in range(0, rows, step):
        xc, tc, vc = (
            x[start : start + step],
            target[start : start + step],
            valid[start : start + step],
        )
        logits = torch.nn.functional.linear(xc, weight, bias).float()  # rounded to x's dtype first
        lse = torch.logsumexp(logits, dim=-1)
        safe = torch.where(vc, tc, 0)
        picked = logits.gather(1, safe.unsqueeze(1)).squeeze(1)
        total += torch.where(vc, lse - picked, 0.0).sum()
        if grads:
            g = torch.softmax(logits, dim=-1)
            g.scatter_add_(1, safe.unsqueeze(1), -torch.ones_like(picked).unsqueeze(1))
            g *= vc.unsqueeze(1)
            if scale is not None:
                g *= scale
            gx[start : start + step] = (g.to(weight.dtype) @ weight).to(x.dtype)
            assert gw is not None
            # In the input dtype (tensor cores), accumulated over chunks in float32.
            gw += (g.to(x.dtype).t() @ xc).float()
            if gb is not None:
                gb += g.sum(0)
    loss = total * scale if scale is not None else total
    loss = loss if upcast else loss.to(x.dtype)
    return (  # a fresh empty tensor per gradient not computed: outputs may not alias
        loss,
        gx,
        gw.to(weight.dtype) if gw is not None else x.new_empty(0),
        gb.to(bias.dtype) if gb is not None and bias is not None else x.new_empty(0),
    )


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
    g = grad_loss.float()
    dbias = (g * gb.float()).to(gb.dtype) if ctx.has_bias else None
    return (
        (g * gx.float()).to(gx.dtype),
        (g * gw.float()).to(gw.dtype),
        dbias,
        None,
        None,
        None,
        None,
        None,
    )


linear_cross_entropy.register_autograd(_backward, setup_context=_setup)
