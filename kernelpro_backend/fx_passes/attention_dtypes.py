"""The dtypes of an attention chain as libraries write it, for its rewrite into SDPA.

Owns: `cast_dtype` (what a `.to(dtype)` / `.type(dtype)` / `.float()` ... casts to),
`past_casts`, `dtype_reason` (why SDPA would not compute the chain's output dtype, or would
round finer than a cast in the chain: None when it is exact) and `finite_mask` (a float32
additive mask kept finite where autocast would make it bf16).
Must not: walk or rewrite the chain (attention_rewrite.py does).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from .torch_level import example_value

_CASTS = {"float": torch.float32, "half": torch.float16, "bfloat16": torch.bfloat16}


def cast_dtype(node: fx.Node) -> torch.dtype | None:
    """The dtype a `.to(dtype)`, `.type(dtype)`, `.float()`, `.half()` or `.bfloat16()` casts
    to (a `.to(other.dtype)` reaches dynamo's graph as a dtype), or None."""
    if node.op != "call_method":
        return None
    if node.target in _CASTS and len(node.args) == 1 and not node.kwargs:
        return _CASTS[str(node.target)]
    if node.target in ("to", "type") and len(node.args) + len(node.kwargs) == 2:
        to = node.args[1] if len(node.args) == 2 else node.kwargs.get("dtype")
        return to if isinstance(to, torch.dtype) and to.is_floating_point else None
    return None


def past_casts(node: Any) -> Any:
    """`node` past the dtype casts in front of it."""
    while isinstance(node, fx.Node) and cast_dtype(node) is not None:
        node = node.args[0]
    return node


def finite_mask(graph: fx.Graph, bias: fx.Node, q: fx.Node, amp: dict[str, Any]) -> fx.Node:
    """The additive mask as SDPA gets it. Under bf16 autocast, autocast casts a float32 mask
    to bf16, and float32's minimum (Hugging Face's "masked") rounds to -inf there: a row of
    queries with every key masked (left padding) would get SDPA's 0 where eager, adding the
    finite minimum in float32, averages v. Clamped to bf16's minimum it stays finite and
    absorbs the scores as float32's did: the same softmax in every row."""
    qv, bv = example_value(q), example_value(bias)
    if not isinstance(qv, torch.Tensor) or not isinstance(bv, torch.Tensor):
        return bias
    if bv.dtype != torch.float32 or amp.get(qv.device.type) != torch.bfloat16:
        return bias
    return graph.call_method("clamp", (bias,), {"min": torch.finfo(torch.bfloat16).min})


def dtype_reason(
    casts: list[torch.dtype], q: fx.Node, kt: fx.Node, v: fx.Node, out: fx.Node, amp: dict[str, Any]
) -> str | None:
    """Why SDPA would not give the chain's output dtype, or round coarser than a cast of the
    chain (None: it gives it)."""
    vals = [example_value(n) for n in (q, kt, v, out)]
    if not all(isinstance(x, torch.Tensor) for x in vals):
        return "no example values"
    qv, kv, vv, ov = vals
    device = qv.device.type
    if device in amp:  # autocast casts SDPA's floating inputs (CPU and CUDA lists)
        got = amp[device]
    elif qv.dtype == kv.dtype == vv.dtype:
        got = qv.dtype
    else:
        return f"q, k and v differ in dtype ({qv.dtype}, {kv.dtype}, {vv.dtype})"
    if got != ov.dtype:
        return f"SDPA would return {got}, the chain returns {ov.dtype}"
    eps = torch.finfo(got).eps
    coarse = [c for c in casts if torch.finfo(c).eps > eps]
    if coarse:
        return f"the weights are rounded to {coarse[0]}, coarser than the output's {got}"
    return None
