"""A linear whose rows break 16-byte alignment is padded so that its backward GEMMs run aligned.

`F.linear(x, W, b)` with out_features N not a multiple of 16 bytes' worth of elements of the
dtype the GEMM runs in (8 for bf16/fp16, under autocast autocast's; 4 for fp32) writes logits
whose row stride breaks the alignment cuBLAS's fast kernels need; its forward does not mind
(1.11 ms at 8192x768->50257 against 1.18 ms padded, bf16, one H100), but both backward GEMMs read
dY [M, N] and fall back to the unaligned kernel: 6.89 ms forward+backward under Inductor against
2.91 ms at N=50264 (docs/gpu_runs/2026-12-06-unaligned-gemm/). The rewrite, on Dynamo's graph
before AOTAutograd:

    F.linear(x, W, b)  ->  F.linear(x, F.pad(W, (0, 0, 0, p)), F.pad(b, (0, p)))[..., :N]

so the forward GEMM writes [M, N+p], and the slice's backward (a pad) hands both backward GEMMs
an aligned dY: fused into dY's producer when the producer is in the graph, one copy shared by
both GEMMs when dY is a graph input. In_features K unaligned is padded the same way on x and W
when x is produced in the graph (the pad then sits in x's producer; a graph input would be
copied on every call, x by x, and the forward of such a head is rare). Padding is with zeros, so
each kept output sums the same products as before (the padded ones add exact zeros).

Where the logits leave the graph (returned, as Hugging Face's models do), the caller gets them
contiguous, as the unpadded linear wrote them (a later `.view(-1)` must still work): a copy in
the forward. Views of the logits in the graph are replayed on meta tensors with the padded
strides; one that needs the unpadded strides keeps the linear as written.

When it pays, and otherwise a `ChainNote` says why not:
- on the devices of `PadRule.devices` (CUDA: where the alignment is cuBLAS's), with a backward;
- at least MIN_ROWS rows and MIN_FLOPS flops (see them);
- not when Inductor pads dY itself: its comprehensive padding gives every buffer it writes with
  static shapes a 128-byte row stride (torch/_inductor/ir.py `_pad_strides`; seen in the code
  it generates for a head with its loss in the graph), so with dY's producer in the graph and
  static shapes, padding here would only add the weight's pad, dW's slice and, for returned
  logits, their copy.
Inductor's own `pad_mm` (a joint-graph pattern over mm and its two backward mms) pads the same
way but decides by timing the forward mm alone, which the alignment does not slow: it keeps the
unaligned GEMMs. After this rewrite it finds nothing to pad.

Owns: `pad_unaligned_gemms(gm, notes, rule) -> int` (linears padded) and `PadRule`.
Must not: touch GEMMs between activations (`matmul`, `bmm`: padding them copies an activation on
every call, and attention goes to SDPA) or run anything but the shape ops it replays on meta.
"""

from __future__ import annotations

import math
import operator
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
# is one), dW's slice back to [N, K], for returned logits their copy. Against them the backward's
# unaligned penalty, 3.5x on two GEMMs of 2*M*N*K flops each: the pad and slice move ~12*N*K
# bytes, the penalty ~10*M*N*K flops' time, so at H100's ~700 TFLOPS and ~3.3 TB/s padding pays
# from M ~ 250 rows; and below ~4 GFLOPs (~6 us at that rate) a GEMM is a few microseconds,
# where the added launches cost about what the penalty does.
MIN_ROWS = 256
MIN_FLOPS = 2**32


@dataclass(frozen=True)
class PadRule:
    """Where the rewrite applies: `devices` (device types whose GEMMs need the alignment),
    the size gates, and `fallback_pads` (the fallback pads the row stride of buffers it writes
    with static shapes, as Inductor's comprehensive padding does)."""

    devices: tuple[str, ...] = ("cuda",)
    min_rows: int = MIN_ROWS
    min_flops: float = MIN_FLOPS
    fallback_pads: bool = True


def fallback_pads_rows(fallback: str) -> bool:
    """Whether the fallback gives the buffers it writes aligned rows (Inductor's config)."""
    if fallback != "inductor":
        return False
    import torch._inductor.config as inductor_config

    return bool(inductor_config.comprehensive_padding)


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


@dataclass
class _Plan:
    n: int
    k: int
    pad_n: int
    pad_k: int
    dtype: torch.dtype
    escapes: list[fx.Node]  # nodes (the linear or views of it) returned by the graph
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
    plan = _Plan(n, k, 0, 0, out.dtype, [])
    why: list[str] = []
    if pad_k and x.op in ("placeholder", "get_attr"):
        why.append(f"K={k} left: x is a graph input, padding it would copy it on every call")
    elif pad_k:
        plan.pad_k = pad_k
    if pad_n:
        walked = _walk_logits(linear, n, pad_n, out)
        static = all(isinstance(s, int) for s in xv.shape)
        if isinstance(walked, str):
            why.append(f"N={n} left: {walked}")
        elif walked[1] and static and rule.fallback_pads:
            why.append(
                f"N={n} left: dY is written in the graph with static shapes, and the fallback "
                "pads its rows itself (Inductor's comprehensive padding)"
            )
        else:
            plan.pad_n, plan.escapes = pad_n, walked[0]
    plan.left = "; ".join(why)
    if not plan.pad_n and not plan.pad_k:
        return f"{what}: " + plan.left
    return plan


_VIEW_METHODS = {
    "view", "reshape", "flatten", "unflatten", "transpose", "permute", "t", "unsqueeze", "squeeze",
    "expand", "narrow", "select", "swapaxes", "movedim", "detach", "__getitem__",
}  # fmt: skip
_VIEW_FUNCTIONS = {
    operator.getitem, torch.reshape, torch.flatten, torch.unflatten, torch.transpose,
    torch.permute, torch.t, torch.unsqueeze, torch.squeeze, torch.narrow, torch.select,
    torch.swapaxes, torch.movedim, torch.detach,
}  # fmt: skip
_ALIAS_CASTS = {"to", "type", "float", "half", "bfloat16", "double"}  # self when the dtype holds
_STRIDED = {"as_strided", "split", "chunk", "unbind", "tensor_split", "split_with_sizes", "stride"}


def _walk_logits(
    linear: fx.Node, n: int, pad: int, out: torch.Tensor
) -> tuple[list[fx.Node], bool] | str:
    """([the linear or its views that the graph returns], whether anything in the graph reads
    them), or why the padded strides would not do. Views are replayed on a meta tensor with the
    padded layout; any other reader gets a tensor it reads at any strides."""
    sizes = [_hint(s) for s in out.shape[:-1]]
    if any(s is None for s in sizes):
        return "the logits' sizes have no hint"
    shape = [int(s or 0) for s in sizes] + [n + pad]
    padded = torch.empty(shape, dtype=out.dtype, device="meta")[..., :n]
    todo, escapes, read = [(linear, padded)], [], False
    while todo:
        node, meta = todo.pop()
        for user in node.users:
            if user.op == "output":
                escapes.append(node)
                continue
            name = user.target if user.op == "call_method" else getattr(user.target, "__name__", "")
            if name in _STRIDED or user.target is torch.as_strided:
                return f"{user.name} ({name}) reads the logits' strides"
            if getattr(user.target, "namespace", None) == "kernelpro":
                return f"{user.name} ({user.target}) writes the logits' gradient itself"
            view = _replay(user, node, meta)
            if isinstance(view, str):
                return view
            if view is None:
                read = True
            else:
                todo.append((user, view))
    if len(escapes) > 1:
        return "several views of the logits are returned (their copies would not alias)"
    return escapes, read


def _replay(user: fx.Node, node: fx.Node, meta: torch.Tensor) -> torch.Tensor | str | None:
    """`user` on the padded layout when it is a view (or returns its input), None when it
    reads it into a new tensor, or why it cannot take the padded layout."""
    method = user.op == "call_method"
    if method and user.target in _ALIAS_CASTS:
        before, after = example_value(node), example_value(user)
        same = isinstance(after, torch.Tensor) and after.dtype == getattr(before, "dtype", None)
        return meta if same else None
    if method and isinstance(user.target, str) and user.target.endswith("_"):
        return meta  # in place: the same tensor
    if not (method and user.target in _VIEW_METHODS) and user.target not in _VIEW_FUNCTIONS:
        return None
    if arg(user, 0, "input") is not node:
        return None
    try:
        args = [meta, *(_concrete(a) for a in user.args[1:])]
        kwargs = {k: _concrete(v) for k, v in user.kwargs.items()}
    except ValueError:
        return None  # an index that is a tensor: advanced indexing copies
    try:
        if method:
            result = getattr(meta, str(user.target))(*args[1:], **kwargs)
        else:
            result = user.target(*args, **kwargs)  # type: ignore[operator]
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return f"{user.name} ({user.target}) needs the unpadded strides: {first}"
    return result if isinstance(result, torch.Tensor) else f"{user.name} returns several views"


def _concrete(a: Any) -> Any:
    """A view's argument with graph nodes and symbolic sizes as the ints they hold now."""
    if isinstance(a, fx.Node):
        a = example_value(a)
        if isinstance(a, torch.Tensor):
            raise ValueError("a tensor argument")
    if isinstance(a, (tuple, list)):
        return type(a)(_concrete(v) for v in a)
    if isinstance(a, slice):
        return slice(_concrete(a.start), _concrete(a.stop), _concrete(a.step))
    if isinstance(a, torch.SymInt):
        hint = _hint(a)
        if hint is None:
            raise ValueError("a size with no hint")
        return hint
    return a


def _apply(graph: fx.Graph, linear: fx.Node, plan: _Plan) -> str:
    """Rewrite `linear` by `plan`; returns what it became (explain's words)."""
    x, w, b = arg(linear, 0, "input"), arg(linear, 1, "weight"), arg(linear, 2, "bias")
    trace = linear.meta.get("stack_trace")
    with graph.inserting_before(linear):
        w = graph.call_function(F.pad, (w, (0, plan.pad_k, 0, plan.pad_n)))
        if plan.pad_k:
            x = graph.call_function(F.pad, (x, (0, plan.pad_k)))
        if plan.pad_n and isinstance(b, fx.Node):
            b = graph.call_function(F.pad, (b, (0, plan.pad_n)))
        args = (x, w) if b is None else (x, w, b)
        padded = graph.call_function(linear.target, args)  # type: ignore[arg-type]
    result = padded
    if plan.pad_n:
        with graph.inserting_after(padded):
            index: Any = (Ellipsis, slice(None, plan.n))
            result = graph.call_function(operator.getitem, (padded, index))
    for node in (w, x, b, padded, result):
        if isinstance(node, fx.Node) and trace and "stack_trace" not in node.meta:
            node.meta["stack_trace"] = trace
    linear.replace_all_uses_with(result)
    graph.erase_node(linear)
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    for node in plan.escapes:  # returned as the unpadded linear wrote them
        node = result if node is linear else node
        with graph.inserting_before(output):
            copy = graph.call_method("contiguous", (node,))
        output.replace_input_with(node, copy)
    dims = ", ".join(
        f"{d}={size} -> {size + pad}"
        for d, size, pad in (("N", plan.n, plan.pad_n), ("K", plan.k, plan.pad_k))
        if pad
    )
    made = f"padded to {ALIGN_BYTES}-byte rows in {plan.dtype}: {dims}"
    if plan.escapes:
        made += " (the returned logits copied contiguous)"
    return made + (f"; {plan.left}" if plan.left else "")
