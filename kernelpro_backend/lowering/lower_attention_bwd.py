"""Lowering a scaled-dot-product attention BACKWARD subgraph to the attention_backward template.

Owns: reading each backward op's arguments by schema name (CPU flash, CUDA SDPA flash and
efficient, and the raw `_flash_attention_backward` / `_efficient_attention_backward` whose
tensors are [B, S, H, D]), rejecting what the template does not do (boolean masks, biases of
the raw ops, dropout, varlen, windows, grouped heads, cuDNN), and writing every operand's
strides, the logsumexp's strides and each gradient output's strides in one order, [B, H, S, D]
(the template never sees a layout). An additive bias (the SDPA efficient op's `attn_bias`, the
CPU op's float `attn_mask`) is read as the forward reads it; the efficient op's fourth output,
the bias's gradient ([B, H, Sq, Sk], last dimension padded), is the scores' gradient dS.
Must not: render source.

Logsumexp: every variant saves the natural-log logsumexp of the scaled scores per query row,
float32, with batch and heads first and at least seq_q entries per row: CPU [B,H,S] (strides
of [B,S,H]), CUDA flash [B,H,S], efficient [B,H,ceil(S/32)*32] (padded; the padding is never
read). Causal masks: SDPA's `is_causal` is top-left (key n visible to query m iff n <= m);
`_efficient_attention_backward`'s custom_mask_type 2 is bottom-right (n <= m + Sk - Sq).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx

from ..codegen.errors import Unsupported
from ..fx_passes import Subgraph
from ..fx_passes.ops import op_name
from .lower_attention import bias_operand, shape_fields, softmax_scale
from .operands import bound_args, operand

_BHSD = (0, 1, 2, 3)
_BSHD = (0, 2, 1, 3)  # position of B, H, S, D in a [B, S, H, D] tensor
# op -> (name of the grad_out argument, layout of q/k/v/out/grads)
_VARIANTS: dict[str, tuple[str, tuple[int, ...]]] = {
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": ("grad_out", _BHSD),
    "aten::_scaled_dot_product_flash_attention_backward": ("grad_out", _BHSD),
    "aten::_scaled_dot_product_efficient_attention_backward": ("grad_out_", _BHSD),
    "aten::_flash_attention_backward": ("grad_out", _BSHD),
    "aten::_efficient_attention_backward": ("grad_out_", _BSHD),
}


def _absent(value: Any) -> bool:
    """None, or a graph value that is None or an empty tensor (dense flash passes those)."""
    if value is None:
        return True
    if isinstance(value, fx.Node):
        val = value.meta.get("val")
        return val is None or (isinstance(val, torch.Tensor) and val.numel() == 0)
    return False


def _causal_offset(name: str, args: dict[str, Any], sq: int, sk: int) -> int | None:
    """None when not causal, else the offset c of the mask `key n visible iff n <= m + c`."""
    if name == "aten::_efficient_attention_backward":
        mask_type = int(args["custom_mask_type"])
        if mask_type not in (0, 1, 2):
            raise Unsupported(f"custom_mask_type {mask_type} is not a causal mask the template has")
        offset = {0: None, 1: 0, 2: sk - sq}[mask_type]
    else:
        offset = 0 if args.get("is_causal") else None
    if offset is not None and sq != sk and "flash_attention_backward" in name and "cpu" not in name:
        raise Unsupported(
            "causal CUDA flash attention with seq_q != seq_k: its mask alignment is not verified "
            "here (SDPA never picks flash for it); left to the fallback"
        )
    if offset is not None and offset < 0:
        raise Unsupported(f"bottom-right causal mask with seq_q {sq} > seq_k {sk} masks whole rows")
    return offset


_BIASED = (  # the backward ops whose additive bias the template reads
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
    "aten::_scaled_dot_product_efficient_attention_backward",
)


def _reject_extras(name: str, args: dict[str, Any]) -> None:
    biases = ("bias",) if name in _BIASED else ("attn_mask", "attn_bias", "bias")
    for extra in (
        *biases,
        "cum_seq_q",
        "cum_seq_k",
        "cu_seqlens_q",
        "cu_seqlens_k",
    ):
        if extra in args and not _absent(args[extra]):
            raise Unsupported(
                f"attention backward with {extra} is not supported (only causal or no mask, "
                "dense batches)"
            )
    if float(args.get("dropout_p", 0.0) or 0.0) != 0.0:
        raise Unsupported("attention backward with dropout is not supported")
    for window in ("window_size", "window_size_left", "window_size_right"):
        if args.get(window) not in (None, -1):
            raise Unsupported(f"sliding-window attention ({window}) is not supported")
    if args.get("shared_storage_dqdkdv"):
        raise Unsupported("shared_storage_dqdkdv gradients are not supported")


def _operand4(node: Any, sg: Subgraph, layout: tuple[int, ...]) -> tuple[int, int, tuple]:
    """(input index, offset, strides in [B, H, S, D] order) of a 4-d operand."""
    idx, offset, strides = operand(node, sg)
    return idx, offset, tuple(strides[d] for d in layout)


def _bhsd(node: fx.Node, layout: tuple[int, ...]) -> tuple[int, ...]:
    shape = tuple(int(s) for s in node.meta["val"].shape)
    if len(shape) != 4:
        raise Unsupported(f"attention tensor of shape {shape}: need 4 dims")
    return tuple(shape[d] for d in layout)


def lower_attention_backward(sg: Subgraph, att: fx.Node) -> dict[str, Any]:
    name = op_name(att)
    if name not in _VARIANTS:
        raise Unsupported(
            f"{name} has no backward template (cuDNN's saved statistics are not verified here); "
            "left to the fallback"
        )
    grad_name, layout = _VARIANTS[name]
    args = bound_args(att)
    _reject_extras(name, args)
    q, k, v, out, dout, lse = (
        args[n] for n in ("query", "key", "value", "out", grad_name, "logsumexp")
    )
    (b, h, sq, d), (bk, hk, sk, dk_), (bv, hv, skv, dv) = (_bhsd(x, layout) for x in (q, k, v))
    if (bk, hk) != (b, h) or (bv, hv, skv) != (b, h, sk) or dk_ != d:
        raise Unsupported(
            f"attention shapes q {(b, h, sq, d)}, k {(bk, hk, sk, dk_)}, v {(bv, hv, skv, dv)} "
            "([B,H,S,D]): need equal batch and heads (no grouped-query attention)"
        )
    if _bhsd(out, layout) != (b, h, sq, dv) or _bhsd(dout, layout) != (b, h, sq, dv):
        raise Unsupported("attention out / grad_out shape differs from [B, H, Sq, Dv]")
    dtypes = {x.meta["val"].dtype for x in (q, k, v, out, dout)}
    if len(dtypes) != 1 or next(iter(dtypes)) not in (torch.float32, torch.bfloat16, torch.float16):
        raise Unsupported(f"attention backward dtypes {dtypes}: need one of float32/bf16/fp16")
    if d > 256 or dv > 256:
        raise Unsupported(f"head dim {max(d, dv)} > 256 does not fit the template's tile")
    lse_val = lse.meta["val"]
    if (
        lse_val.dtype != torch.float32
        or lse_val.dim() != 3
        or tuple(lse_val.shape[:2]) != (b, h)
        or lse_val.shape[2] < sq
    ):
        raise Unsupported(
            f"logsumexp {lse_val.dtype}{tuple(lse_val.shape)}: need float32 [B, H, >= Sq]"
        )
    bias = bias_operand(args, sg, (b, h, sq, sk)) if name in _BIASED else None
    grads = []
    for o in sg.outputs:
        if (
            o.target is not operator.getitem
            or o.args[0] is not att
            or o.args[1] not in (0, 1, 2, 3)
        ):
            raise Unsupported(f"attention backward output {o.name} is not grad_q, grad_k or grad_v")
        stride = tuple(int(s) for s in o.meta["val"].stride())
        if o.args[1] == 3:  # the bias's gradient: [B, H, Sq, Sk] whatever the q/k/v layout
            if bias is None or tuple(o.meta["val"].shape) != (b, h, sq, sk):
                raise Unsupported(
                    f"attention bias gradient of shape {tuple(o.meta['val'].shape)}: need the "
                    f"bias read and [B, H, Sq, Sk] = {(b, h, sq, sk)}"
                )
            grads.append((3, stride))
            continue
        grads.append((int(o.args[1]), tuple(stride[i] for i in layout)))  # type: ignore[arg-type]
    anchor = (
        ("q", _operand4(q, sg, layout)),
        ("k", _operand4(k, sg, layout)),
        ("v", _operand4(v, sg, layout)),
        ("out", _operand4(out, sg, layout)),
        ("grad_out", _operand4(dout, sg, layout)),
        ("lse", operand(lse, sg)),
        ("grads", tuple(grads)),  # (0 grad_q | 1 grad_k | 2 grad_v, strides [B,H,S,D])
        *shape_fields(b, h, sq, sk, d, dv),
        ("causal", _causal_offset(name, args, sq, sk) is not None),
        ("causal_offset", _causal_offset(name, args, sq, sk) or 0),
        ("scale", softmax_scale(args.get("scale"), d)),
        ("operand_dtype", str(next(iter(dtypes))).removeprefix("torch.")),
        *((("bias", bias),) if bias is not None else ()),  # absent: old specs keep their digest
    )
    stores = tuple((("A", which), 0, (), ()) for which, _ in grads)
    return dict(template="attention_backward", domain=(b, h, sk), anchor=anchor, stores=stores)
