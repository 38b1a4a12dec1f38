"""A linear whose rows break 16-byte alignment is padded so that its backward GEMMs run aligned.

`F.linear(x, W, b)` with out_features N not a multiple of 16 bytes' worth of elements of the
dtype the GEMM runs in (8 for bf16/fp16, under autocast autocast's; 4 for fp32) writes logits
whose row stride breaks the alignment cuBLAS's fast kernels need; its forward does not mind
(1.11 ms at 8192x768->50257 against 1.18 ms padded, bf16, one H100), but both backward GEMMs read
dY [M, N] and fall back to the unaligned kernel: 6.89 ms forward+backward under Inductor against
2.91 ms at N=50264 (docs/gpu_runs/2026-12-06-unaligned-gemm/). The rewrite, on Dynamo's graph
before AOTAutograd:

    F.linear(x, W, b)  ->  F.linear(x, F.pad(W, (0, 0, 0, p)), F.pad(b, (0, p)))[..., :N]

The forward runs as written: the unaligned output does not slow its GEMM (Inductor's pad_mm,
below, may still pad it by timing it, as it would without this rewrite; the logits then leave
with padded rows, as under plain Inductor). Only the backward pads:

    F.linear(x, W, b)  ->  padded_grad_linear(x, W, b, p)     # an autograd.Function whose
        backward: dYp = cat(dY, zeros[.., p]); dX = dYp @ F.pad(W, (0, 0, 0, p));
                  dW = (dYp^T @ x)[:N]; db = dY summed over the rows

so both backward GEMMs read an aligned dY: one copy shared by both when dY is a graph input;
when its producer is in the graph, Inductor writes dY into its slice of the padded buffer.
AOTAutograd traces the function's backward into the joint graph: the fallback compiles it like
any other backward. In_features K
unaligned is padded in the forward on x and W when x is produced in the graph (the pad then sits
in x's producer; a graph input would be copied on every call, and the forward of such a head is
rare). Padding is with zeros, so each kept output sums the same products as before (the padded
ones add exact zeros). Under autocast, x, W and b are cast to the GEMM's dtype in the graph
first (as autocast would), so the backward runs in that dtype too.

When it pays, and otherwise a `ChainNote` says why not:
- on the devices of `PadRule.devices` (CUDA: where the alignment is cuBLAS's), with a backward;
- at least MIN_ROWS rows and MIN_FLOPS flops (see them);
- also when Inductor pads dY itself: its comprehensive padding gives every buffer it writes
  with static shapes a 128-byte row stride (torch/_inductor/ir.py `_pad_strides`), but the
  GEMM's dimension stays 50257, and for dX = dY @ W (K = 50257) cuBLAS then picks an sm80
  CUTLASS kernel, 1.28 ms against 0.82 ms for the padded shape's (8192x768->50257, loss and
  logits in the graph, one H100, 2026-12-06). Padded here, all three GEMMs run aligned and the
  step is 1-2% faster than without (docs/gpu_runs/2026-12-06-unaligned-gemm/, "kp-forced").
Inductor's own `pad_mm` (a joint-graph pattern over mm and its two backward mms) pads the same
way but decides by timing the forward mm alone, which the alignment does not slow: it keeps the
unaligned GEMMs. After this rewrite it finds nothing to pad.

Owns: `pad_unaligned_gemms(gm, notes, rule) -> int` (linears padded), `PadRule` and
`padded_grad_linear`.
Must not: touch GEMMs between activations (`matmul`, `bmm`: padding them copies an activation on
every call, and attention goes to SDPA).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

from .torch_level import ChainNote, arg, example_value, finish_rewrite, note

NAME = "pad_gemm"
_LINEARS = {F.linear, torch._C._nn.linear}
ALIGN_BYTES = 16  # cuBLAS's fast (vectorised, TMA) kernels: 16-byte aligned rows and pointers

# Each padded linear adds small kernels: the weight's pad (fused with autocast's cast when there
# is one), dY's pad when dY is a graph input, dW's slice back to [N, K]. Against them the backward's
# unaligned penalty, 3.5x on two GEMMs of 2*M*N*K flops each: the pad and slice move ~12*N*K
# bytes, the penalty ~10*M*N*K flops' time, so at H100's ~700 TFLOPS and ~3.3 TB/s padding pays
# from M ~ 250 rows; and below ~4 GFLOPs (~6 us at that rate) a GEMM is a few microseconds,
# where the added launches cost about what the penalty does.
MIN_ROWS = 256
MIN_FLOPS = 2**32


@dataclass(frozen=True)
class PadRule:
    """Where the rewrite applies: `devices` (device types whose GEMMs need the alignment) and
    the size gates."""

    devices: tuple[str, ...] = ("cuda",)
    min_rows: int = MIN_ROWS
    min_flops: float = MIN_FLOPS


def pad_unaligned_gemms(
    gm: fx.GraphModule, notes: list[ChainNote] | None = None, rule: PadRule | None = None
) -> int:
    """Pad every linear of `gm` whose rows break the alignment where it pays (see the module);
    returns how many. Each unaligned linear goes into `notes`, padded or why not."""
    rule = rule or PadRule()
    done = 0
    for linear in list(gm.graph.nodes):
        if linear.op != "call_function" or linear.target not in _LINEARS:
            continue
        plan = _plan(linear, rule)
        if plan is None:
            continue  # aligned, or not a GEMM this rewrite reads
        if isinstance(plan, str):
            note(notes, NAME, linear, None, plan)
            continue
        note(notes, NAME, linear, _apply(gm.graph, linear, plan), None)
        done += 1
    return finish_rewrite(gm, done, "unaligned linear(s) padded")


class _PadGrad(torch.autograd.Function):
    """linear(x, w, b) whose backward GEMMs read dY padded with `pad` zero columns."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, b: Any, pad: int) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        ctx.pad, ctx.bias = pad, b is not None
        return F.linear(x, w, b)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
        x, w = ctx.saved_tensors
        n = w.shape[0]
        # [..., N + pad]: aligned rows, one buffer for both GEMMs. A cat, not F.pad: Inductor
        # lowers a cat whose input comes from a reduction (a loss's backward in the graph) by
        # writing that input straight into its slice of the padded buffer; F.pad became a
        # pointwise kernel recomputing the loss's backward (1318 us against 947 at 50257 on an
        # H100, 2026-12-06; docs/gpu_runs/2026-12-06-unaligned-gemm/, "kp-forced").
        dyp = torch.cat([dy, dy.new_zeros(*dy.shape[:-1], ctx.pad)], dim=-1)
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = torch.matmul(dyp, F.pad(w, (0, 0, 0, ctx.pad)))
        if ctx.needs_input_grad[1]:
            rows = dyp.reshape(-1, n + ctx.pad)
            dw = (rows.t() @ x.reshape(-1, x.shape[-1]))[:n]
        if ctx.bias and ctx.needs_input_grad[2]:
            db = dy.reshape(-1, n).sum(0)
        return dx, dw, db, None


def padded_grad_linear(x: torch.Tensor, w: torch.Tensor, b: Any, pad: int) -> torch.Tensor:
    """`F.linear(x, w, b)`, its backward GEMMs on dY padded to N + `pad` columns (x, w, b in
    the GEMM's dtype already)."""
    return _PadGrad.apply(x, w, b, pad)  # type: ignore[no-any-return]


@dataclass
class _Plan:
    n: int
    k: int
    pad_n: int
    pad_k: int
    dtype: torch.dtype
    left: str = ""  # what was not padded, and why


def _hint(size: Any) -> int | None:
    if isinstance(size, int):
        return size
    hint = getattr(getattr(size, "node", None), "hint", None)
    return int(hint) if hint is not None else None


def _plan(linear: fx.Node, rule: PadRule) -> _Plan | str | None:
    x, w = arg(linear, 0, "input"), arg(linear, 1, "weight")
    out, xv, wv = example_value(linear), example_value(x), example_value(w)
    tensors = (out, xv, wv)
    if not all(isinstance(t, torch.Tensor) for t in tensors) or wv.dim() != 2 or xv.dim() < 1:
        return None
    n, k = wv.shape
    if not (isinstance(n, int) and isinstance(k, int)) or not out.dtype.is_floating_point:
        return None
    align = max(
        1, ALIGN_BYTES // out.dtype.itemsize
    )  # the GEMM's dtype: autocast's, or the inputs'
    pad_n, pad_k = -n % align, -k % align
    if not pad_n and not pad_k:
        return None
    what = f"{'N' if pad_n else 'K'}={n if pad_n else k} is not a multiple of {align} ({out.dtype})"
    if out.device.type not in rule.devices:
        return f"{what}, but it runs on {out.device.type}: only {'/'.join(rule.devices)} pads"
    if not out.requires_grad:
        return f"{what}, but it has no backward: the forward alone does not pay"
    rows = [_hint(s) for s in xv.shape[:-1]]
    if any(r is None for r in rows):
        return f"{what}, but its row count has no hint"
    m = math.prod(r for r in rows if r is not None)
    if m < rule.min_rows or 2 * m * n * k < rule.min_flops:
        return (
            f"{what}, but {m}x{k}->{n} is below {rule.min_rows} rows or {rule.min_flops:.3g} flops"
        )
    plan = _Plan(n, k, 0, 0, out.dtype)
    why: list[str] = []
    if pad_k and x.op in ("placeholder", "get_attr"):
        why.append(f"K={k} left: x is a graph input, padding it would copy it on every call")
    elif pad_k:
        plan.pad_k = pad_k
    plan.pad_n = pad_n
    plan.left = "; ".join(why)
    if not plan.pad_n and not plan.pad_k:
        return f"{what}: " + plan.left
    return plan


def _cast(graph: fx.Graph, node: Any, dtype: torch.dtype) -> Any:
    """`node` in `dtype` (a graph node casting it when its example value is in another)."""
    value = example_value(node)
    if not isinstance(node, fx.Node) or getattr(value, "dtype", dtype) == dtype:
        return node
    return graph.call_method("to", (node, dtype))


def _apply(graph: fx.Graph, linear: fx.Node, plan: _Plan) -> str:
    """Rewrite `linear` by `plan`; returns what it became (explain's words)."""
    x, w, b = arg(linear, 0, "input"), arg(linear, 1, "weight"), arg(linear, 2, "bias")
    trace = linear.meta.get("stack_trace")
    with graph.inserting_before(linear):
        made: list[Any] = []
        if plan.pad_n:  # in the GEMM's dtype first, as autocast would cast them
            x, w, b = (_cast(graph, t, plan.dtype) for t in (x, w, b))
            made += [x, w, b]
        if plan.pad_k:
            w = graph.call_function(F.pad, (w, (0, plan.pad_k)))
            x = graph.call_function(F.pad, (x, (0, plan.pad_k)))
            made += [x, w]
        if plan.pad_n:
            result = graph.call_function(padded_grad_linear, (x, w, b, plan.pad_n))
        else:
            args = (x, w) if b is None else (x, w, b)
            result = graph.call_function(linear.target, args)  # type: ignore[arg-type]
    for node in (*made, result):
        if isinstance(node, fx.Node) and trace and "stack_trace" not in node.meta:
            node.meta["stack_trace"] = trace
    linear.replace_all_uses_with(result)
    graph.erase_node(linear)
    dims = ", ".join(
        f"{d}={size} -> {size + pad}"
        for d, size, pad in (("N", plan.n, plan.pad_n), ("K", plan.k, plan.pad_k))
        if pad
    )
    where = "the backward's dY" if plan.pad_n and not plan.pad_k else "the GEMMs"
    made_text = f"padded to {ALIGN_BYTES}-byte rows in {plan.dtype} ({where}): {dims}"
    return made_text + (f"; {plan.left}" if plan.left else "")
