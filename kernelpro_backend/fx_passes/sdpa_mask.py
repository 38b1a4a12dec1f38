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

A mask that is itself a graph input (made before a graph break: BART and Whisper, whose
LayerDrop draw `torch.rand([]) < p` breaks the graph before each layer) is rewritten the same way
only when the tensor the graph is compiled with is another graph's output proved constant
(mask_provenance.py): `constant_outputs` says which outputs of a graph are, the compiled graph
registers them, and the later graph relies on the placeholder, which the backend guards on each
call (rewrite/guarded.py). Any other mask input stays, noted for explain with what it held.

Random and uninitialised values (`rand`, `dropout`, `empty`...) are never constants, nor is a
value the graph writes in place after building it (`mask[..., 0, 1:] = False`, through any view:
Dynamo's example values share a storage where nodes alias), whose readers see the write; a mask
input the graph writes is not relied on either.

Owns: `simplify_sdpa_masks(gm, notes, values) -> int` (masks dropped or made causal),
`constant_outputs(gm)` (the outputs of a graph proved constant masks).
Must not: match hand-written attention (attention_rewrite.py), read a graph input's value
(causal_mask.py does, under a runtime guard) or keep the registry of proven masks
(mask_provenance.py does).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

from .causal_mask import lower_triangular
from .inplace import InPlaceWrites
from .mask_provenance import ALL, CAUSAL, ProvenMask, proven, rely_on
from .torch_level import ChainNote, arg, example_value, finish_rewrite, input_name, note

NAME = "attention_mask"
MAX_ELEMENTS = 2**27  # per evaluated node (a bool [B, 1, L, S] of 128 Mi elements: 128 MiB)
SDPA_CALLS = {F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention}
# An additive mask entry at most this is exactly -inf in effect: exp underflows to 0 for any
# finite fp32/bf16 score difference (fp16's finite minimum, -65504, is not accepted).
_BLOCKED = -1e30
# Ops whose value is drawn or left uninitialised: the same on no two calls.
_UNFIXED = re.compile(
    r"^_?(rand|bernoulli|normal|multinomial|uniform|exponential|geometric|cauchy|log_normal"
    r"|random|poisson|rrelu|empty|new_empty)|dropout"
)


class _NotConstant(Exception):
    """The mask depends on a graph input, or on something not evaluated here."""


class _Evaluation:
    """Values computed so far, and which values the graph writes in place (inplace.py)."""

    def __init__(self, graph: fx.Graph) -> None:
        self.values: dict[fx.Node, Any] = {}
        self.untouched = InPlaceWrites(graph).untouched


def _evaluate(mask: fx.Node, ev: _Evaluation) -> Any:
    """`mask`'s value computed on the CPU from its ancestors, or raises _NotConstant."""
    cache = ev.values
    if mask in cache:
        return cache[mask]
    if mask.op not in ("call_function", "call_method"):
        raise _NotConstant(f"{mask.op} {mask.name}")
    if not ev.untouched(mask):
        raise _NotConstant(f"{mask.name} is written in place")
    name = str(mask.target) if mask.op == "call_method" else getattr(mask.target, "__name__", "")
    if _UNFIXED.search(name):
        raise _NotConstant(f"{mask.name}: {name} is not the same on every call")
    shown = example_value(mask)
    if isinstance(shown, torch.Tensor) and shown.numel() > MAX_ELEMENTS:
        expanded = any(s == 0 for s in shown.stride())
        if not expanded:
            raise _NotConstant(f"{mask.name}: {shown.numel()} elements")

    def value(a: Any) -> Any:
        return _evaluate(a, ev) if isinstance(a, fx.Node) else a

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


def constant_outputs(gm: fx.GraphModule) -> dict[int, ProvenMask]:
    """The outputs of `gm` (by position in its output tuple) that are masks proved constant:
    built from positions alone, attending everywhere or causal over their own last two dims.
    What a later graph that reads them across a graph break may rely on (mask_provenance.py)."""
    out = gm.graph.output_node().args[0]
    if not isinstance(out, (tuple, list)):
        return {}
    free: set[fx.Node] = set()  # nodes with no graph input and no attribute among their ancestors
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method") and all(
            n in free for n in node.all_input_nodes
        ):
            free.add(node)
    found, ev = {}, _Evaluation(gm.graph)
    for i, node in enumerate(out):
        shown = example_value(node)
        if node not in free or not isinstance(shown, torch.Tensor) or shown.dim() < 2:
            continue
        if not (shown.dtype == torch.bool or shown.dtype.is_floating_point):
            continue
        try:
            value = _evaluate(node, ev)
        except _NotConstant:
            continue
        same = isinstance(value, torch.Tensor) and value.dtype == shown.dtype
        if not same or tuple(value.shape) != tuple(shown.shape):  # (autocast: not as run)
            continue
        kind = _causal(value, value.shape[-2], value.shape[-1])
        if kind is not None:
            found[i] = ProvenMask(CAUSAL if kind else ALL, tuple(value.shape), value.dtype)
    return found


def _proven_input(
    mask: fx.Node, values: Mapping[fx.Node, Any], rows: Any, cols: Any, ev: _Evaluation
) -> tuple[ProvenMask, bool] | None:
    """(the proof, causal?) when the graph input `mask` is, as compiled, a mask an earlier
    graph proved constant that attends everywhere over this score or is causal over it, and
    this graph does not write it in place."""
    fact = proven(values.get(mask))
    if fact is None or type(rows) is not int or type(cols) is not int or not ev.untouched(mask):
        return None
    if fact.kind == CAUSAL:
        return (fact, True) if fact.shape[-2:] == (rows, cols) and rows == cols else None
    try:
        torch.broadcast_shapes(fact.shape, (*fact.shape[:-2], rows, cols))
    except RuntimeError:
        return None
    return fact, False


def _input_note(mask: fx.Node, values: Mapping[fx.Node, Any], rows: int, cols: int) -> str:
    """Why a mask that is a graph input stays, with what it held when compiled."""
    value = values.get(mask)
    held = ""
    if isinstance(value, torch.Tensor) and value.numel() <= MAX_ELEMENTS:
        kind = _causal(value.detach().cpu(), rows, cols)
        held = "" if kind is None else CAUSAL if kind else ALL
    when = f" (when compiled it {held})" if held else ""
    return (
        f"the mask is a graph input, {input_name(mask)}{when}, and not an earlier compiled "
        "graph's output proved constant (made eagerly, from the inputs, or a view or copy "
        "made between the graphs): its value can change between calls"
    )


def _rewrite(node: fx.Node, causal: bool) -> None:
    """SDPA `node` without its mask, with `is_causal=True` when `causal`."""
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


def simplify_sdpa_masks(
    gm: fx.GraphModule,
    notes: list[ChainNote] | None = None,
    values: Mapping[fx.Node, Any] | None = None,
) -> int:
    """Drop each SDPA `attn_mask` of `gm` that is a constant attending everywhere, and turn one
    that is a constant causal mask over a square score into `is_causal=True`; returns how many.
    A mask that is a placeholder is rewritten when its compile-time value in `values` is a
    registered proven mask (the placeholder is marked: the caller guards it), else noted."""
    done, ev = 0, _Evaluation(gm.graph)
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in SDPA_CALLS:
            continue
        mask = arg(node, 3, "attn_mask")
        if not isinstance(mask, fx.Node) or arg(node, 5, "is_causal", False):
            continue
        q, k = example_value(node.args[0]), example_value(node.args[1])
        if not isinstance(q, torch.Tensor) or not isinstance(k, torch.Tensor):
            continue
        rows, cols = q.shape[-2], k.shape[-2]
        if mask.op == "placeholder":
            relied = _proven_input(mask, values or {}, rows, cols, ev)
            if relied is None:
                note(notes, NAME, node, None, _input_note(mask, values or {}, rows, cols))
                continue
            rely_on(mask, relied[0])
            causal, why = relied[1], (
                f"input {input_name(mask)}, an earlier graph's output proved to be a constant "
                f"mask that {relied[0].kind}, checked on each call"
            )  # fmt: skip
        else:
            try:
                value = _evaluate(mask, ev)
            except _NotConstant:
                continue  # built from the inputs (padding), or written in place: a real mask
            kind = _causal(value, rows, cols) if isinstance(value, torch.Tensor) else None
            if kind is None:
                note(
                    notes, NAME, node, None, "mask is a constant but neither all-attend nor causal"
                )
                continue
            causal, why = kind, "constant mask"
        _rewrite(node, causal)
        note(notes, NAME, node, f"{why}: {'is_causal=True' if causal else 'attn_mask=None'}", None)
        done += 1
    for node in reversed(list(gm.graph.nodes)):  # what built the dropped masks, now unread
        if node in ev.values and not node.users:
            gm.graph.erase_node(node)
    return finish_rewrite(gm, done, "constant SDPA mask(s) dropped or made causal")
