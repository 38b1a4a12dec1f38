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
the graph is compiled (causal_mask.py), under a runtime check the backend adds (guarded.py:
its values can change between calls); any other mask read from a buffer stays an `attn_mask`.

Owns: `rewrite_attention(gm) -> int` (chains rewritten).
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

from .causal_mask import causal_buffer
from .torch_level import arg, example_value, finish_rewrite, replace_chain

# Functions and the method names dynamo keeps for `x.matmul(y)`, `x.mul(c)`, ...
_MATMULS = {operator.matmul, torch.matmul, torch.bmm, "matmul", "bmm"}
_MULS = {operator.mul, torch.mul, "mul"}
_DIVS = {operator.truediv, torch.div, "div"}
_ADDS = {operator.add, torch.add, "add"}
_SOFTMAX = {F.softmax, torch.softmax, torch.Tensor.softmax, "softmax"}
_DROPOUT = {F.dropout, torch.dropout}


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


def _softmax_input(node: fx.Node) -> fx.Node | None:
    """The scores a last-dim softmax reads, or None."""
    if not _is(node, _SOFTMAX) or not node.args:
        return None
    scores = node.args[0]
    ndim = _ndim(scores)
    dim = arg(node, 1, "dim")
    if not isinstance(scores, fx.Node) or ndim is None or not isinstance(dim, int):
        return None
    if dim % ndim != ndim - 1 or arg(node, 2, "dtype") is not None:
        return None
    return scores


def _strip_dropout(node: fx.Node) -> fx.Node:
    """`node` without a p=0 dropout (or one in eval mode) in front of it."""
    if _is(node, _DROPOUT) and isinstance(node.args[0], fx.Node):
        p = arg(node, 1, "p", 0.5)
        training = arg(node, 2, "training", True)
        if p == 0.0 or training is False:
            return node.args[0]
    return node


class _Chain:
    """What the walk back from `@ v` found."""

    def __init__(self) -> None:
        self.mask: fx.Node | None = None  # boolean: True = attend
        self.bias: fx.Node | None = None  # additive float mask
        self.scale = 1.0
        self.nodes: list[fx.Node] = []  # the chain's intermediates, to erase


def _peel_mask(node: fx.Node, chain: _Chain) -> fx.Node | None:
    """The scores before a -inf masked_fill or an additive mask (or `node` with none)."""
    is_fill = node.target in (torch.masked_fill, torch.Tensor.masked_fill) or (
        node.op == "call_method" and node.target == "masked_fill"
    )
    is_add = node.target in _ADDS and len(node.args) == 2 and not node.kwargs
    if (is_fill or is_add) and (chain.mask is not None or chain.bias is not None):
        return None  # a second mask: not one SDPA call
    if is_fill:
        scores, masked, value = (arg(node, i, n) for i, n in enumerate(("self", "mask", "value")))
        if not (isinstance(value, float) and value == -math.inf) or not isinstance(masked, fx.Node):
            return None
        chain.mask = masked  # positions to drop; inverted when the rewrite is built
        chain.nodes.append(node)
        return scores if isinstance(scores, fx.Node) else None
    if is_add:
        a, b = node.args
        for scores, bias in ((a, b), (b, a)):
            if _is(scores, _MATMULS) or _is_scaled(scores):
                v = example_value(bias)
                if isinstance(v, torch.Tensor) and v.dtype.is_floating_point:
                    chain.bias = bias  # type: ignore[assignment]
                    chain.nodes.append(node)
                    return scores  # type: ignore[return-value]
        return None
    return node


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
        return None
    if node.target in _DIVS and len(node.args) == 2 and not node.kwargs:
        scores, divisor = node.args
        if isinstance(divisor, (int, float)) and not isinstance(divisor, bool) and divisor:
            chain.scale = 1.0 / float(divisor)
            chain.nodes.append(node)
            return scores  # type: ignore[return-value]
        return None
    return node


def _match(out: fx.Node) -> tuple[_Chain, fx.Node, fx.Node, fx.Node] | None:
    """(chain, q, k transposed, v) when `out` is `softmax(scale * q @ kT [masked]) @ v`."""
    if not _is(out, _MATMULS) or len(out.args) != 2:
        return None
    probs, v = out.args
    if not isinstance(probs, fx.Node) or not isinstance(v, fx.Node):
        return None
    chain = _Chain()
    node, user = probs, out
    stripped = _strip_dropout(node)
    if stripped is not node:
        if not _only_user(node, user):
            return None
        chain.nodes.append(node)
        user, node = node, stripped
    scores = _softmax_input(node)
    if scores is None or not _only_user(node, user):
        return None
    chain.nodes.append(node)
    user = node
    # Scale and mask in either order: scale then mask (nanoGPT), mask then scale.
    current = scores
    for peel in (_peel_mask, _peel_scale, _peel_mask):
        if not _only_user(current, user):
            return None
        nxt = peel(current, chain)
        if nxt is None:
            return None
        if nxt is not current:  # `current` was a mask or a scale, now in chain.nodes
            user, current = current, nxt
    if not _is(current, _MATMULS) or not _only_user(current, user) or len(current.args) != 2:
        return None
    q, kt = current.args
    chain.nodes.append(current)
    if not isinstance(q, fx.Node) or not isinstance(kt, fx.Node):
        return None
    dims = [_ndim(n) for n in (q, kt, v)]
    if None in dims or min(d for d in dims if d is not None) < 3:
        return None
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
) -> int:
    """Rewrite every exact hand-written attention chain of `gm` into SDPA; returns how many.
    With `values` (the compile-time value of each placeholder), a mask read from a buffer that
    holds a causal mask becomes `is_causal=True` too, and that placeholder goes into
    `relied_on`: the caller must check at runtime that its values have not changed
    (guarded.py)."""
    done = 0
    for out in list(gm.graph.nodes):
        found = _match(out) if out.op in ("call_function", "call_method") else None
        if found is None:
            continue
        chain, q, kt, v = found
        graph = gm.graph
        with graph.inserting_before(out):
            k = _untransposed(graph, kt)
            kwargs: dict[str, Any] = {"scale": chain.scale}
            buffer = None
            if chain.mask is not None and values is not None and relied_on is not None:
                buffer = causal_buffer(chain.mask, values)
                if buffer is not None and buffer not in relied_on:
                    relied_on.append(buffer)
            if chain.mask is not None and (_causal(chain.mask) or buffer is not None):
                kwargs["is_causal"] = True
            elif chain.mask is not None:
                kwargs["attn_mask"] = _keep(graph, chain.mask)
            elif chain.bias is not None:
                kwargs["attn_mask"] = chain.bias
            sdpa = graph.call_function(F.scaled_dot_product_attention, (q, k, v), kwargs)
        # From `@ v` back to `q @ kT`, then what only they read (a bypassed transpose, `~x`).
        mask = [chain.mask] if chain.mask is not None else []
        if kwargs.get("is_causal") and chain.mask is not None:  # what built the mask
            mask += [a for a in chain.mask.args if isinstance(a, fx.Node)]
        replace_chain(graph, out, sdpa, [*chain.nodes, kt, *mask])
        done += 1
    return finish_rewrite(gm, done, "hand-written attention chain(s) rewritten to SDPA")
