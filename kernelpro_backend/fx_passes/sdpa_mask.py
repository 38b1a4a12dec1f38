"""An SDPA mask the graph builds from indices alone is a constant: evaluated when the graph is
compiled, an all-attend mask is dropped and a causal one becomes `is_causal=True`.

Libraries build attention masks as functions of positions (Hugging Face's `masking_utils`:
`kv_idx <= q_idx` from two `arange`s, expanded to [B, 1, L, S]). Run eagerly they skip the
mask where it changes nothing (no padding: `attn_mask=None`; causal: `is_causal=True`), but
under tracing that check cannot run, so the compiled graph passes SDPA a materialised boolean
mask. That costs what the mask forbids: on an H100 (bf16, 2026-12-06, torch 2.11) a BERT
step's SDPA with an all-True [32, 1, 512, 512] mask lost its fused kernel to the math path
(float32 matmuls on CUDA cores, 19 ms of a 68 ms step under Inductor, where eager's step was
54 ms), and a Qwen2 step's causal mask made cuDNN attention compute every tile (2.6x eager's
attention time).

A mask qualifies only when every node it depends on is a call with no graph input among its
ancestors (static shapes: the sizes are numbers): its value is then the same on every call, and
evaluating it once on the CPU is exact. All-True boolean (or all-zero additive) masks are
dropped; a mask equal to `tril(ones(L, L))` over a square score (boolean, or additive with 0 on
and below the diagonal and -inf, or a float below -1e30, above it) becomes `is_causal=True`,
SDPA's own top-left causal mask. Anything else stays as written. A value larger than
`MAX_ELEMENTS` is not evaluated (compile-time memory).

A mask that is itself a graph input stays too, but is noted for explain with what it held when
compiled: a model whose training step breaks the graph between building the mask and using it
hands every later graph a materialised mask (BART and Whisper: LayerDrop's `torch.rand([]) < p`
breaks the graph before each layer, so each layer's SDPA reads an all-True mask built in the
first graph). Its value is the caller's; nothing guards it between calls.

Owns: `simplify_sdpa_masks(gm, notes) -> int` (masks dropped or made causal).
Must not: match hand-written attention (attention_rewrite.py) or read a graph input's value
(causal_mask.py does, under a runtime guard).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

from .causal_mask import lower_triangular
from .torch_level import ChainNote, arg, example_value, finish_rewrite, note

NAME = "attention_mask"
MAX_ELEMENTS = 2**27  # per evaluated node (a bool [B, 1, L, S] of 128 Mi elements: 128 MiB)
_SDPA = {F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention}
# An additive mask entry at most this is exactly -inf in effect: exp underflows to 0 for any
# finite fp32/bf16 score difference (fp16's finite minimum, -65504, is not accepted).
_BLOCKED = -1e30


class _NotConstant(Exception):
    """The mask depends on a graph input, or on something not evaluated here."""


def _evaluate(mask: fx.Node, cache: dict[fx.Node, Any]) -> Any:
    """`mask`'s value computed on the CPU from its ancestors, or raises _NotConstant."""
    if mask in cache:
        return cache[mask]
    if mask.op not in ("call_function", "call_method"):
        raise _NotConstant(f"{mask.op} {mask.name}")
    shown = example_value(mask)
    if isinstance(shown, torch.Tensor) and shown.numel() > MAX_ELEMENTS:
        expanded = any(s == 0 for s in shown.stride())
        if not expanded:
            raise _NotConstant(f"{mask.name}: {shown.numel()} elements")

    def value(a: Any) -> Any:
        return _evaluate(a, cache) if isinstance(a, fx.Node) else a

    args: Any = fx.node.map_aggregate(mask.args, value)
    kwargs: dict[str, Any] = dict(fx.node.map_aggregate(mask.kwargs, value))  # type: ignore[arg-type]
    if "device" in kwargs:
        kwargs["device"] = "cpu"
    try:
        if mask.op == "call_method":
            self, *rest = args
            if mask.target in ("to", "cuda", "cpu"):  # a move keeps the values; a cast is made
                dtypes = [a for a in (*rest, kwargs.get("dtype")) if isinstance(a, torch.dtype)]
                result = self.to(dtypes[0]) if dtypes else self
            else:
                result = getattr(self, str(mask.target))(*rest, **kwargs)
        else:
            result = mask.target(*args, **kwargs)  # type: ignore[operator]
    except Exception as e:  # an op this evaluation cannot run on the CPU: leave it
        raise _NotConstant(f"{mask.name}: {type(e).__name__}") from e
    cache[mask] = result
    return result


def _causal(value: torch.Tensor, rows: int, cols: int) -> bool | None:
    """True: `value` is `tril(ones(rows, cols))`'s pattern over a square score; False: every
    entry attends (any score, cross-attention's too); None: neither."""
    if value.dim() < 2:
        return None
    try:
        full = torch.broadcast_to(value, (*value.shape[:-2], rows, cols))
    except RuntimeError:
        return None
    if value.dtype == torch.bool:
        attend = full
    elif value.is_floating_point():
        zero, blocked = full == 0, full <= _BLOCKED
        if not bool((zero | blocked).all()):
            return None
        attend = zero
    else:
        return None
    if bool(attend.all()):
        return False
    if rows != cols:  # SDPA's is_causal is top-left aligned: only a square score is rewritten
        return None
    return True if lower_triangular(attend) else None


def _input_note(mask: fx.Node, values: Mapping[fx.Node, Any], rows: int, cols: int) -> str:
    """Why a mask that is a graph input stays, with what it held when compiled."""
    value = values.get(mask)
    held = ""
    if isinstance(value, torch.Tensor) and value.numel() <= MAX_ELEMENTS:
        kind = _causal(value.detach().cpu(), rows, cols)
        held = "" if kind is None else "is causal" if kind else "attends everywhere"
    when = f" (when compiled it {held})" if held else ""
    return (
        f"the mask is a graph input, {mask.name}{when}: made before a graph break or passed "
        "in, its value can change between calls and nothing guards it"
    )


def simplify_sdpa_masks(
    gm: fx.GraphModule,
    notes: list[ChainNote] | None = None,
    values: Mapping[fx.Node, Any] | None = None,
) -> int:
    """Drop each SDPA `attn_mask` of `gm` that is a constant attending everywhere, and turn one
    that is a constant causal mask over a square score into `is_causal=True`; returns how many.
    A mask that is a placeholder is noted with its compile-time value from `values`."""
    done, cache = 0, dict[fx.Node, Any]()
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in _SDPA:
            continue
        mask = arg(node, 3, "attn_mask")
        if not isinstance(mask, fx.Node) or arg(node, 5, "is_causal", False):
            continue
        q, k = example_value(node.args[0]), example_value(node.args[1])
        if not isinstance(q, torch.Tensor) or not isinstance(k, torch.Tensor):
            continue
        rows, cols = q.shape[-2], k.shape[-2]
        if mask.op == "placeholder":
            note(notes, NAME, node, None, _input_note(mask, values or {}, rows, cols))
            continue
        try:
            value = _evaluate(mask, cache)
        except _NotConstant:
            continue  # built from the inputs (padding): a real mask
        causal = _causal(value, rows, cols) if isinstance(value, torch.Tensor) else None
        if causal is None:
            note(notes, NAME, node, None, "mask is a constant but neither all-attend nor causal")
            continue
        args, kwargs = list(node.args), dict(node.kwargs)
        if len(args) > 3:
            args[3] = None
        kwargs.pop("attn_mask", None)
        if causal:
            if len(args) > 5:
                args[5] = True
            else:
                kwargs["is_causal"] = True
        node.args, node.kwargs = tuple(args), kwargs
        made = "is_causal=True" if causal else "attn_mask=None"
        note(notes, NAME, node, f"constant mask: {made}", None)
        done += 1
    for node in reversed(list(gm.graph.nodes)):  # what built the dropped masks, now unread
        if node in cache and not node.users:
            gm.graph.erase_node(node)
    return finish_rewrite(gm, done, "constant SDPA mask(s) dropped or made causal")
