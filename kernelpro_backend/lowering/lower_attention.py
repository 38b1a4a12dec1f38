"""Lowering a scaled-dot-product attention subgraph (forward) to the attention template.

Owns: reading the SDPA op's arguments by schema name (CPU flash, CUDA flash, efficient and
cuDNN variants share query/key/value/is_causal/scale), the additive bias operand
(`bias_operand`: the efficient op's `attn_bias`, the CPU op's float `attn_mask`, broadcast to
[B, H, Sq, Sk] by zero strides), rejecting what the template does not do (boolean masks,
dropout, grouped heads), and mapping the output and logsumexp outputs; `attention_node` finds
the op, and lower.py sends backward ones to lower_attention_bwd.
Must not: render source.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import torch
import torch.fx as fx

from ..codegen.errors import Unsupported
from ..fx_passes import Subgraph
from ..fx_passes.ops import is_attention_op
from .operands import bound_args, operand


def attention_node(sg: Subgraph) -> fx.Node:
    """The subgraph's one attention op (forward or backward)."""
    # by name, not role: the forward ops carry the nondeterministic_seeded tag (dropout), so
    # ops.role() calls them OTHER
    ops = [n for n in sg.nodes if is_attention_op(n)]
    if len(ops) != 1:
        raise Unsupported(f"{len(ops)} attention ops in one subgraph; the template takes one")
    return ops[0]


def shape_fields(b: int, h: int, sq: int, sk: int, d: int, dv: int) -> tuple[tuple[str, int], ...]:
    """The anchor fields of an attention's sizes, shared by the forward and backward lowering."""
    return (
        ("batch", b), ("heads", h), ("seq_q", sq), ("seq_k", sk), ("head_dim", d),
        ("value_dim", dv),
    )  # fmt: skip


def softmax_scale(scale: Any, head_dim: int) -> float:
    """SDPA's `scale` argument, or its default 1/sqrt(head_dim)."""
    return float(scale) if scale is not None else 1.0 / math.sqrt(head_dim)


BIAS_ARGS = ("attn_bias", "attn_mask")  # the efficient ops' bias, the CPU ops' mask


def bias_operand(
    args: dict[str, Any], sg: Subgraph, sizes: tuple[int, int, int, int]
) -> tuple[int, int, tuple[int, ...]] | None:
    """None without a bias, else the additive bias's (input index, offset, strides in
    [B, H, Sq, Sk] order): a float tensor broadcastable to `sizes`, read with stride 0 along
    its broadcast dimensions. Boolean masks are refused (the template only adds)."""
    given = [args[n] for n in BIAS_ARGS if isinstance(args.get(n), fx.Node)]
    if not given:
        return None
    node = given[0]
    val = node.meta["val"]
    if val.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise Unsupported(f"attention mask of dtype {val.dtype}: only additive float biases")
    if val.numel() == 0:
        return None  # an empty tensor stands for no bias
    if val.dim() > 4:
        raise Unsupported(f"attention bias of {val.dim()} dims: need at most 4")
    pad = 4 - val.dim()
    shape = (1,) * pad + tuple(int(s) for s in val.shape)
    if any(have not in (1, want) for have, want in zip(shape, sizes, strict=True)):
        raise Unsupported(
            f"attention bias of shape {tuple(val.shape)} does not broadcast to {sizes}"
        )
    idx, offset, strides = operand(node, sg)
    full = (0,) * pad + strides
    return idx, offset, tuple(0 if have == 1 else s for have, s in zip(shape, full, strict=True))


def lower_attention(sg: Subgraph, att: fx.Node) -> dict[str, Any]:
    """The attention template's fields for the forward op `att` (see `attention_node`)."""
    args = bound_args(att)
    if float(args.get("dropout_p", 0.0) or 0.0) != 0.0:
        raise Unsupported("attention with dropout is not supported")
    if args.get("enable_gqa"):
        raise Unsupported("grouped-query attention is not supported")
    q, k, v = args["query"], args["key"], args["value"]
    qv, kv, vv = (x.meta["val"] for x in (q, k, v))
    if qv.dim() != 4 or kv.shape[:2] != qv.shape[:2] or vv.shape[:3] != kv.shape[:3]:
        raise Unsupported(
            f"attention shapes {tuple(qv.shape)}, {tuple(kv.shape)}, {tuple(vv.shape)}: need [B,H,S,D] with equal heads"
        )
    if qv.dtype not in (torch.float32, torch.bfloat16, torch.float16) or not (
        qv.dtype == kv.dtype == vv.dtype
    ):
        raise Unsupported(f"attention dtype {qv.dtype}: need one of float32/bf16/fp16")
    b, h, sq, d = (int(s) for s in qv.shape)
    sk, dv = int(kv.shape[2]), int(vv.shape[3])
    bias = bias_operand(args, sg, (b, h, sq, sk))
    if d > 256 or dv > 256:
        raise Unsupported(f"head dim {max(d, dv)} > 256 does not fit the template's tile")
    which, lse_len = [], sq
    for out in sg.outputs:
        if (
            out.target is not operator.getitem
            or out.args[0] is not att
            or out.args[1] not in (0, 1)
        ):
            raise Unsupported(f"attention output {out.name} is not the output or the logsumexp")
        if out.args[1] == 1:
            lse_shape = tuple(out.meta["val"].shape)
            if lse_shape[:2] != (b, h) or len(lse_shape) != 3 or lse_shape[2] < sq:
                raise Unsupported(f"logsumexp of shape {lse_shape}: need [B, H, >= Sq]")
            lse_len = lse_shape[2]
        which.append(int(out.args[1]))  # type: ignore[arg-type]
    anchor = (
        ("q", operand(q, sg)),
        ("k", operand(k, sg)),
        ("v", operand(v, sg)),
        *shape_fields(b, h, sq, sk, d, dv),
        ("causal", bool(args.get("is_causal", False))),
        ("scale", softmax_scale(args.get("scale"), d)),
        ("operand_dtype", str(qv.dtype).removeprefix("torch.")),
        # absent: old specs keep their digest
        *((("bias", bias),) if bias is not None else ()),
        # the efficient op's logsumexp rows, padded to 32 with +inf as its kernel pads them
        *((("lse_rows", lse_len),) if lse_len != sq else ()),
    )
    stores = tuple((("A", w), 0, (), ()) for w in which)
    return dict(template="attention", domain=(b, h, sq), anchor=anchor, stores=stores)
