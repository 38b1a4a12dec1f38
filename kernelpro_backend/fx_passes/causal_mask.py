"""A causal mask read from a buffer: `~mask[:T, :T]` (or `mask[..., :T, :T] == 0`) where the
buffer, at compile time, holds a lower-triangular matrix of ones (nanoGPT's
`register_buffer("bias", torch.tril(torch.ones(n, n)))`).

SDPA with that mask as an `attn_mask` reads it and computes every tile of the score matrix;
with `is_causal=True` it skips the tiles above the diagonal (about half of them), and
kernelpro's attention templates take it. But a buffer's values can change after the graph is
compiled (an in-place write, `load_state_dict`, a DDP broadcast), and Dynamo does not guard on
them: the rewrite that relies on the values is only sound with a runtime check, which the
backend adds (rewrite/guarded.py) for each buffer this module names. That check runs before the
graph does: a buffer the graph itself writes in place (`self.bias[..., 0, 1] = 1`, or through a
view) is read after the write by the same call, so it is never relied on (inplace.py).

Owns: `causal_buffer(drop, values, writes) -> placeholder | None` (the graph pattern and the value
check at compile time), `lower_triangular(t) -> bool` (the value check, also run again at
runtime when the buffer changed).
Must not: rewrite the graph (attention_rewrite.py does) or check at runtime (rewrite/guarded.py
does).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

import torch
import torch.fx as fx

from .inplace import InPlaceWrites
from .torch_level import arg, example_value

_NOTS = {operator.invert, torch.logical_not, torch.bitwise_not, "logical_not", "bitwise_not"}
_EQS = {operator.eq, torch.eq, "eq", "__eq__"}


def lower_triangular(t: torch.Tensor) -> bool:
    """Whether every matrix in `t`'s last two dims is square, with its entries nonzero exactly
    on and below the diagonal (one device-to-host read)."""
    if t.dim() < 2 or t.shape[-1] != t.shape[-2] or t.numel() == 0:
        return False
    n = t.shape[-1]
    want = torch.ones(n, n, dtype=torch.bool, device=t.device).tril()
    return bool(torch.equal(t != 0, want.expand(t.shape)))


def causal_buffer(
    drop: fx.Node, values: Mapping[fx.Node, Any], writes: InPlaceWrites
) -> fx.Node | None:
    """The placeholder whose values make the drop mask `drop` causal over a square score, if
    `drop` is `~keep` / `keep == 0` with `keep` = `buffer[..., :T, :T]` (the same T both times,
    leading dims taken whole) or the buffer itself, the buffer's compile-time value in `values`
    is lower triangular, and no op of the graph (`writes`) writes the buffer in place; else
    None."""
    keep = _keep_of(drop)
    if keep is None:
        return None
    base: Any = keep
    slices: tuple[Any, ...] | None = None  # the whole buffer: square, so the score is too
    if keep.op == "call_function" and keep.target is operator.getitem:
        base, index = keep.args
        slices = index if isinstance(index, tuple) else (index,)
    elif keep.op != "placeholder":
        return None
    if not isinstance(base, fx.Node) or base.op != "placeholder" or not writes.untouched(base):
        return None
    value = values.get(base)
    if not isinstance(value, torch.Tensor) or value.dim() < 2:
        return None
    if slices is not None and not _top_left_square(slices, value.dim()):
        return None
    try:
        value._version  # noqa: B018  (an inference tensor has none: nothing to guard with)
    except RuntimeError:
        return None
    return base if lower_triangular(value) else None


def _top_left_square(slices: tuple[Any, ...], ndim: int) -> bool:
    """Whether `slices` are `[..., :T, :T]`: leading dims whole, one T for both last dims."""
    if len(slices) != ndim or not all(isinstance(s, slice) for s in slices):
        return False
    *lead, rows, cols = slices
    if any(s != slice(None, None, None) for s in lead):
        return False
    if {rows.start, cols.start} - {None, 0} or {rows.step, cols.step} - {None, 1}:
        return False
    same = rows.stop is cols.stop or (type(rows.stop) is int and rows.stop == cols.stop)
    return rows.stop is not None and same


def _keep_of(drop: fx.Node) -> fx.Node | None:
    """`keep` for a drop mask `~keep` (boolean) or `keep == 0`."""
    if drop.target in _NOTS and drop.args and isinstance(drop.args[0], fx.Node):
        v = example_value(drop.args[0])
        return drop.args[0] if isinstance(v, torch.Tensor) and v.dtype == torch.bool else None
    if drop.target in _EQS and len(drop.args) == 2 and isinstance(drop.args[0], fx.Node):
        other = arg(drop, 1, "other")
        return drop.args[0] if isinstance(other, (int, float)) and other == 0 else None
    return None
