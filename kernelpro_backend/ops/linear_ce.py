"""An LM head and its cross-entropy in chunks of tokens: the [tokens, vocab] logits never exist.

`kernelpro::linear_cross_entropy(x, weight, bias, target, ...)` computes, chunk by chunk of
rows, the logits `x_c @ weight.T + bias` (one GEMM), then in one row kernel their log-sum-exp
and loss and — when gradients are wanted — the gradient of the logits (softmax - one-hot,
times 1 / rows for a mean) written over them in place (linear_ce_rows.py), and from it dx_c
and the accumulated dweight/dbias (two GEMMs): the forward returns the loss, those gradients
and the factor that makes them exact (rows / targets not ignored, for a mean), and the backward
only scales them by the loss's gradient times that factor (the chunked linear+cross-entropy of
Liger-Kernel). Peak memory drops from a few [tokens, vocab] tensors to
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

from .fast_op import fast_op
from .linear_ce_rows import Finish, cross_entropy_rows, finish

# Rows per chunk: about 2**27 logits (256 MiB in bf16) at a time. On the H100 (8192 x 1024 ->
# 32000 bf16, BENCHMARKS.md "The LM head in one chunk") 2**26 / 2**27 / 2**28 logits a chunk
# took 3.319 / 2.934 / 3.010 ms a step: fewer GEMM launches of a useful size win until one
# chunk holds every logit (Inductor's peak memory, 500 MiB there).
CHUNK_ELEMENTS = 2**27


def chunk_rows(rows: int, vocab: int) -> int:
    return max(1, min(rows, CHUNK_ELEMENTS // max(vocab, 1)))


@fast_op("kernelpro::linear_cross_entropy")
def linear_cross_entropy(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    target: torch.Tensor,
    ignore_index: int,
    reduction: str,
    upcast: bool,
    grad_x: bool,
    grad_w: bool,
    grad_b: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, dx, dweight, dbias, factor): each gradient (empty unless its `grad_*` asks for
    it: a frozen input costs no GEMM) is the loss's times 1 / `factor`, which the backward
    multiplies back in."""
    rows = x.shape[0]
    step = chunk_rows(rows, weight.shape[0])
    # For a mean the row kernel scales the gradient by 1 / rows, a host number, and the
    # backward by rows / (targets not ignored): nothing before the chunks' kernels waits on a
    # device scalar, so the GPU goes from GEMM to row kernel to GEMM while the host launches.
    pre = 1.0 / max(rows, 1) if reduction == "mean" else 1.0
    grad_b = grad_b and bias is not None
    grads = grad_x or grad_w or grad_b
    # This body runs once per training step on the host's critical path (a host-bound step ends
    # when its launches do): one chunk, the common case, takes no slices, and the last chunk's
    # row kernel finishes the loss where it can (linear_ce_rows.Finish) instead of a launch more.
    # The first chunk's GEMM goes first: the GPU starts while the host allocates the rest.
    whole = step >= rows
    logits = _logits(x if whole else x[:step], weight, bias)
    losses = x.new_empty(rows, dtype=torch.float32)
    gx = torch.empty_like(x) if grad_x else x.new_empty(0)
    gw = torch.empty_like(weight) if grad_w else x.new_empty(0)
    gb = torch.zeros(weight.shape[0], dtype=torch.float32, device=x.device) if grad_b else None
    then = Finish(
        losses,
        target,
        reduction == "mean",
        x.new_empty((), dtype=torch.float32 if upcast else x.dtype),
        x.new_empty((), dtype=torch.float32),
    )
    for start in range(0, rows, step):
        xc = x if whole else x[start : start + step]
        tc = target if whole else target[start : start + step]
        if start:
            del logits  # the previous chunk's logits go before the next GEMM allocates
            logits = _logits(xc, weight, bias)
        # The loss per row, and the logits overwritten by their gradient (times `pre`).
        last = start + step >= rows
        cross_entropy_rows(
            logits, tc, pre, ignore_index, grads,
            out=losses if whole else losses[start : start + step], then=then if last else None,
        )  # fmt: skip
        if grad_x:
            torch.mm(logits, weight, out=gx if whole else gx[start : start + step])
        if grad_w:
            if start == 0:  # dW: the first chunk's GEMM writes it, the others accumulate
                torch.mm(logits.t(), xc, out=gw)
            else:
                gw.addmm_(logits.t(), xc)
        if gb is not None:
            gb += logits.sum(0, dtype=torch.float32)
    del logits
    if grad_w and rows == 0:
        gw.zero_()
    if then.done:
        loss, factor = then.loss, then.factor
    else:
        loss, factor = finish(
            losses, target, ignore_index, then.mean, torch.float32 if upcast else x.dtype
        )
    return (  # a fresh empty tensor per gradient not computed: outputs may not alias
        loss,
        gx,
        gw,
        gb.to(bias.dtype) if gb is not None and bias is not None else x.new_empty(0),
        factor,
    )


def _logits(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.nn.functional.linear(x, weight, bias).contiguous()


@linear_cross_entropy.register_fake
def _fake(x, weight, bias, target, ignore_index, reduction, upcast, grad_x, grad_w, grad_b):  # type: ignore[no-untyped-def]
    loss = x.new_empty((), dtype=torch.float32 if upcast else x.dtype)
    gx = torch.empty_like(x) if grad_x else x.new_empty(0)
    gw = torch.empty_like(weight) if grad_w else x.new_empty(0)
    gb = torch.empty_like(bias) if grad_b and bias is not None else x.new_empty(0)
    return loss, gx, gw, gb, x.new_empty((), dtype=torch.float32)


def _setup(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    _, gx, gw, gb, factor = output
    ctx.computed = (inputs[7], inputs[8], inputs[9] and inputs[2] is not None)
    ctx.save_for_backward(gx, gw, gb, factor)


def _backward(ctx, grad_loss, _gx, _gw, _gb, _factor):  # type: ignore[no-untyped-def]
    gx, gw, gb, factor = ctx.saved_tensors
    names = ("x", "weight", "bias")
    for wanted, done, name in zip(ctx.needs_input_grad[:3], ctx.computed, names, strict=True):
        if wanted and not done:
            raise RuntimeError(
                f"kernelpro::linear_cross_entropy did not compute the gradient of {name} (it "
                "did not require one when the graph was compiled) and is being differentiated "
                "for it; recompile with grad mode on and requires_grad set"
            )
    # A float32 0-d factor times a bf16/fp16 tensor: one kernel, computed in float32 and rounded
    # once to the tensor's dtype (a 0-d tensor does not promote a dimensioned one).
    g = grad_loss.float() * factor
    return (
        gx * g if ctx.computed[0] else None,
        gw * g if ctx.computed[1] else None,
        gb * g if ctx.computed[2] else None,
        *(None,) * 7,
    )


linear_cross_entropy.register_autograd(_backward, setup_context=_setup)

# The same body without an autograd kernel, for graphs AOTAutograd has differentiated: there
# `fx_passes.linear_ce_rewrite.drop_autograd_kernel` retargets the op's calls to it, sparing
# each step the autograd kernel's Python (the op runs on the host's critical path).
linear_cross_entropy_inner = fast_op("kernelpro::linear_cross_entropy_inner")(
    linear_cross_entropy._init_fn
)
linear_cross_entropy_inner.register_fake(_fake)
