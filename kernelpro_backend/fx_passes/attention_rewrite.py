"""Attention written by hand becomes `scaled_dot_product_attention`, before AOTAutograd.

Models written nanoGPT-style compute attention as a chain of torch ops — `q @ k.transpose(-2,
-1)`, a scale, a mask filled with -inf, softmax, dropout(p=0), `@ v` — which AOTAutograd traces
into a materialised [.., L, S] score matrix, saved for the backward. Rewritten into one
`F.scaled_dot_product_attention` call at the torch level (dynamo's graph, which the backend
receives before AOTAutograd), the chain becomes SDPA's fused forward and backward (flash or
memory-efficient attention on a GPU), which kernelpro's attention subgraphs then see. Inductor's
own pattern matcher knows a few fixed spellings; this walks the chain from its last matmul, so
the order and spelling of scale, mask and dropout do not matter.

Rewritten only when exact: each intermediate has no other user, the scale is a number (or
absent: scale 1), the mask is a boolean `masked_fill` with -inf (passed as SDPA's boolean
`attn_mask`, True = attend) or an additive float mask, dropout has p == 0, and softmax runs over
the last dim. A mask built in the graph as `torch.tril(torch.ones(L, S))`-style over a square
score becomes `is_causal=True`; so does a mask read from a buffer whose values are causal when
the graph is compiled (causal_mask.py), under a runtime check the backend adds (rewrite/guarded.py:
its values can change between calls), unless the graph writes the buffer in place; any other
mask read from a buffer stays an `attn_mask`.

Libraries write the softmax with a dtype and a cast back (Hugging Face's eager attention:
`softmax(w + mask, dim=-1, dtype=torch.float32).to(q.dtype)`, others `.type(v.dtype)`, under
autocast or not) and repeat k and v for grouped-query attention (`repeat_kv`: expand and
reshape, which stays: SDPA gets the repeated k and v, so its kernels are those of multi-head
attention). Casts between softmax and `@ v` are exact to drop when SDPA's output dtype (the
autocast dtype under autocast, which casts SDPA's inputs, else q's) is the chain's and no cast
or softmax dtype is coarser than it (attention_dtypes.py). A float32 additive mask under bf16
autocast is clamped to bf16's range first (`finite_mask` says why). One difference remains,
under float16 autocast: a query row whose every key is masked by float32's minimum (rounded to
float16's -inf) gets SDPA's 0 where eager averages v (rows of padding).
Every matmul reading a softmax gets a `ChainNote` (what it became, or why not) for explain.

Owns: `rewrite_attention(gm, values, relied_on, notes) -> int` (chains rewritten).
Must not: partition, key or lower (partition.py and lowering/ see the SDPA ops afterwards).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

from .attention_dtypes import cast_dtype, dtype_reason, finite_mask, past_casts
from .causal_mask import causal_buffer
from .inplace import InPlaceWrites
from .torch_level import (
    ChainNote,
    arg,
    autocast_dtypes,
    example_value,
    finish_rewrite,
    note,
    replace_chain,
)

# Functions and the method names dynamo keeps for `x.matmul(y)`, `x.mul(c)`, ...
_MATMULS = {operator.matmul, torch.matmul, torch.bmm, "matmul", "bmm"}
_MULS = {operator.mul, torch.mul, "mul"}
_DIVS = {operator.truediv, torch.div, "div"}
_ADDS = {operator.add, torch.add, "add"}
_SOFTMAX = {F.softmax, torch.softmax, torch.Tensor.softmax, "softmax"}
_DROPOUT = {F.dropout, torch.dropout}
NAME = "attention"


def _is(node: Any, targets: set[Any]) -> bool:
    return isinstance(node, fx.Node) and (node.target in targets)


def _ndim(node: Any) -> int | None:
    v = example_value(node)
    return v.dim() if isinstance(v, torch.Tensor) else None


def _only_user(node: fx.Node, user: fx.Node) -> bool:
    return len(node.users) == 1 and user in node.users


def _last_dims(dims: tuple[Any, ...], ndim: int) -> bool:
    """Whether `dims` are the last two dims (any order, negative or not)."""
    norm = {d % ndim for d in dims if isinstance(d, int)}
    return len(dims) == 2 and norm == {ndim - 2, ndim - 1}


class _Chain:
    """What the walk back from `@ v` found."""

    def __init__(self) -> None:
        self.mask: fx.Node | None = None  # boolean: True = attend
        self.bias: fx.Node | None = None  # additive float mask
        self.scale = 1.0
        self.nodes: list[fx.Node] = []  # the chain's intermediates, to erase
        self.casts: list[torch.dtype] = []  # softmax's dtype and the casts after it
        self.reason: str | None = None  # why the chain is not exact, once known


def _softmax_input(node: fx.Node, chain: _Chain) -> fx.Node | None:
    """The scores a last-dim softmax reads (its dtype, if given, into `chain.casts`), or None
    with `chain.reason` set."""
    scores = node.args[0]
    ndim = _ndim(scores)
    dim = arg(node, 1, "dim")
    if not isinstance(scores, fx.Node) or ndim is None or not isinstance(dim, int):
        chain.reason = "softmax over no single dim"
        return None
    if dim % ndim != ndim - 1:
        chain.reason = f"softmax over dim {dim}, not the last"
        return None
    dtype = arg(node, 2, "dtype")
    if dtype is not None:
        chain.casts.append(dtype)
    return scores


def _strip_probs(node: fx.Node, user: fx.Node, chain: _Chain) -> fx.Node | None:
    """The softmax behind `@ v`'s first operand, past casts and a dropout (p=0, or eval
    mode), or None when there is none. A step that makes the chain inexact sets `chain.reason`
    and the walk goes on, so that a refused attention is still told from a plain matmul."""
    while True:
        if _is(node, _SOFTMAX) and node.args:
            if not _only_user(node, user) and chain.reason is None:
                chain.reason = f"the attention weights have another user: {_others(node, user)}"
            return node
        cast = cast_dtype(node)
        if _is(node, _DROPOUT) and isinstance(node.args[0], fx.Node):
            p, training = arg(node, 1, "p", 0.5), arg(node, 2, "training", True)
            if p != 0.0 and training is not False and chain.reason is None:
                chain.reason = f"dropout with p={p} in training"
        elif cast is not None:
            chain.casts.append(cast)
        else:
            return None
        if not _only_user(node, user) and chain.reason is None:
            chain.reason = (
                f"the attention weights ({node.name}) have another user: {_others(node, user)}"
            )
        chain.nodes.append(node)
        user, node = node, node.args[0]  # type: ignore[assignment]
        if not isinstance(node, fx.Node):
            return None


def _others(node: fx.Node, user: fx.Node) -> str:
    return ", ".join(u.name for u in node.users if u is not user)


def _peel_mask(node: fx.Node, chain: _Chain) -> fx.Node | None:
    """The scores before a -inf masked_fill or an additive mask (or `node` with none); None
    with `chain.reason` set when the mask is not one SDPA takes."""
    is_fill = node.target in (torch.masked_fill, torch.Tensor.masked_fill) or (
        node.op == "call_method" and node.target == "masked_fill"
    )
    is_add = node.target in _ADDS and len(node.args) == 2 and not node.kwargs
    if (is_fill or is_add) and (chain.mask is not None or chain.bias is not None):
        chain.reason = "a second mask (SDPA takes one)"
        return None
    if is_fill:
        scores, masked, value = (arg(node, i, n) for i, n in enumerate(("self", "mask", "value")))
        if not (isinstance(value, float) and value == -math.inf) or not isinstance(masked, fx.Node):
            chain.reason = f"masked_fill with {value!r}, not -inf"
            return None
        chain.mask = masked  # positions to drop; inverted when the rewrite is built
        chain.nodes.append(node)
        return scores if isinstance(scores, fx.Node) else None
    if is_add:
        a, b = node.args
        for scores, bias in ((a, b), (b, a)):
            if _is(past_casts(scores), _MATMULS) or _is_scaled(past_casts(scores)):
                v = example_value(bias)
                if isinstance(v, torch.Tensor) and v.dtype.is_floating_point:
                    chain.bias = bias  # type: ignore[assignment]
                    chain.nodes.append(node)
                    return scores  # type: ignore[return-value]
        chain.reason = f"{node.name} adds what is not a floating-point mask tensor"
        return None
    return node


def _peel_casts(node: fx.Node, chain: _Chain) -> fx.Node | None:
    """The scores before a cast (`w.float()` before the mask is added), its dtype recorded."""
    cast = cast_dtype(node)
    if cast is None or not isinstance(node.args[0], fx.Node):
        return node
    chain.casts.append(cast)
    chain.nodes.append(node)
    return node.args[0]


def _is_scaled(node: Any) -> bool:
    return isinstance(node, fx.Node) and node.target in _MULS | _DIVS


def _peel_scale(node: fx.Node, chain: _Chain) -> fx.Node | None:
    if node.target in _MULS and len(node.args) == 2 and not node.kwargs:
        a, b = node.args
        scores, factor = (a, b) if isinstance(a, fx.Node) else (b, a)
        if isinstance(factor, (int, float)) and not isinstance(factor, bool):
            chain.scale = float(factor)
            chain.nodes.append(node)
            return scores  # type: ignore[return-value]
        chain.reason = f"{node.name} scales by a tensor, not a number"
        return None
    if node.target in _DIVS and len(node.args) == 2 and not node.kwargs:
        scores, divisor = node.args
        if isinstance(divisor, (int, float)) and not isinstance(divisor, bool) and divisor:
            chain.scale = 1.0 / float(divisor)
            chain.nodes.append(node)
            return scores  # type: ignore[return-value]
        chain.reason = f"{node.name} divides by a tensor, not a number"
        return None
    return node


Match = tuple[_Chain, fx.Node, fx.Node, fx.Node]


def _match(out: fx.Node) -> Match | str | None:
    """(chain, q, k transposed, v) when `out` is `softmax(scale * q @ kT [masked]) @ v`; why
    not, when `out` is a matmul reading a softmax; None for any other node."""
    if not _is(out, _MATMULS) or len(out.args) != 2:
        return None
    probs, v = out.args
    if not isinstance(probs, fx.Node) or not isinstance(v, fx.Node):
        return None
    chain = _Chain()
    softmax = _strip_probs(probs, out, chain)
    if softmax is None:
        return None  # not attention
    scores = _softmax_input(softmax, chain)
    if chain.reason is not None or scores is None:
        return chain.reason or "not exact"
    chain.nodes.append(softmax)
    user = softmax
    # Scale and mask in either order: scale then mask (nanoGPT), mask then scale.
    current = scores
    peels = (_peel_casts, _peel_mask, _peel_casts, _peel_scale, _peel_casts, _peel_mask)
    for peel in (*peels, _peel_casts):
        if not _only_user(current, user):
            return f"{current.name} has another user: {_others(current, user)}"
        nxt = peel(current, chain)
        if nxt is None:
            return chain.reason or "not exact"
        if nxt is not current:  # `current` was a mask or a scale, now in chain.nodes
            user, current = current, nxt
    if not _is(current, _MATMULS) or len(current.args) != 2:
        return f"the scores come from {current.name}, not a matmul"
    if not _only_user(current, user):
        return f"the scores have another user: {_others(current, user)}"
    q, kt = current.args
    chain.nodes.append(current)
    if not isinstance(q, fx.Node) or not isinstance(kt, fx.Node):
        return "q or k is not a tensor of the graph"
    dims = [_ndim(n) for n in (q, kt, v)]
    if None in dims or min(d for d in dims if d is not None) < 3:
        return "q, k or v has fewer than 3 dims"
    return chain, q, kt, v


def _untransposed(graph: fx.Graph, kt: fx.Node) -> fx.Node:
    """k from the `k.transpose(-2, -1)` the scores read (a transpose of its own otherwise)."""
    ndim = _ndim(kt)
    if (
        kt.op == "call_method"
        and kt.target == "transpose"
        and len(kt.users) == 1
        and ndim is not None
        and _last_dims(tuple(kt.args[1:3]), ndim)
        and isinstance(kt.args[0], fx.Node)
    ):
        return kt.args[0]
    return graph.call_method("transpose", (kt, -2, -1))


def _keep(graph: fx.Graph, drop: fx.Node) -> fx.Node:
    """The positions to attend: `x` for a drop mask `~x`, else `logical_not(drop)`."""
    if drop.target in (operator.invert, torch.logical_not, torch.bitwise_not) and isinstance(
        drop.args[0], fx.Node
    ):
        v = example_value(drop.args[0])
        if isinstance(v, torch.Tensor) and v.dtype == torch.bool:
            return drop.args[0]
    return graph.call_function(torch.logical_not, (drop,))


def _causal(mask: fx.Node) -> bool:
    """A `~tril(ones(L, S, dtype=bool))` drop mask built in the graph over a square score."""
    keep = mask.args[0] if mask.target in (operator.invert, torch.logical_not) else None
    if not isinstance(keep, fx.Node) or keep.target not in (torch.tril, "tril"):
        return False
    ones = keep.args[0] if keep.args else None
    diagonal = arg(keep, 1, "diagonal", 0)
    if diagonal != 0 or not isinstance(ones, fx.Node) or ones.target is not torch.ones:
        return False
    shape = example_value(keep)
    return isinstance(shape, torch.Tensor) and shape.dim() == 2 and shape.shape[0] == shape.shape[1]


def rewrite_attention(
    gm: fx.GraphModule,
    values: Mapping[fx.Node, Any] | None = None,
    relied_on: list[fx.Node] | None = None,
    notes: list[ChainNote] | None = None,
) -> int:
    """Rewrite every exact hand-written attention chain of `gm` into SDPA; returns how many.
    With `values` (the compile-time value of each placeholder), a mask read from a buffer that
    holds a causal mask becomes `is_causal=True` too, and that placeholder goes into
    `relied_on`: the caller must check at runtime that its values have not changed
    (rewrite/guarded.py). `notes` collects each matmul reading a softmax: rewritten, or why not."""
    done = 0
    amp = autocast_dtypes(gm.graph)
    writes = InPlaceWrites(gm.graph) if values is not None else None
    for out in list(gm.graph.nodes):
        found = _match(out) if out.op in ("call_function", "call_method") else None
        if isinstance(found, tuple):
            chain, q, kt, v = found
            why = dtype_reason(chain.casts, q, kt, v, out, amp[out])
            found = why if why is not None else found
        if isinstance(found, str):
            note(notes, NAME, out, None, found)
        if not isinstance(found, tuple):
            continue
        chain, q, kt, v = found
        graph = gm.graph
        with graph.inserting_before(out):
            k = _untransposed(graph, kt)
            kwargs: dict[str, Any] = {"scale": chain.scale}
            buffer = None
            if chain.mask is not None and writes is not None and relied_on is not None:
                buffer = causal_buffer(chain.mask, values or {}, writes)
                if buffer is not None and buffer not in relied_on:
                    relied_on.append(buffer)
            if chain.mask is not None and (_causal(chain.mask) or buffer is not None):
                kwargs["is_causal"] = True
            elif chain.mask is not None:
                kwargs["attn_mask"] = _keep(graph, chain.mask)
            elif chain.bias is not None:
                kwargs["attn_mask"] = finite_mask(graph, chain.bias, q, amp[out])
            sdpa = graph.call_function(F.scaled_dot_product_attention, (q, k, v), kwargs)
        # From `@ v` back to `q @ kT`, then what only they read (a bypassed transpose, `~x`).
        mask = [chain.mask] if chain.mask is not None else []
        if kwargs.get("is_causal") and chain.mask is not None:  # what built the mask
            mask += [a for a in chain.mask.args if isinstance(a, fx.Node)]
        replace_chain(graph, out, sdpa, [*chain.nodes, kt, *mask])
        how = (
            "is_causal" if kwargs.get("is_causal") else "attn_mask" if "attn_mask" in kwargs else ""
        )
        note(notes, NAME, out, f"SDPA{f' ({how})' if how else ''}", None)
        done += 1
    return finish_rewrite(gm, done, "hand-written attention chain(s) rewritten to SDPA")
