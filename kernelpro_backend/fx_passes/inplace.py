"""Which values a Dynamo graph writes in place: what no rewrite may evaluate at compile time or
rely on.

Dynamo's graph keeps reading a tensor's original node after an in-place write to it
(`mask[..., 0, 1:] = False` is an `operator.setitem` node on the same value; `view.fill_(1)`
writes its base through a view), so a value computed from the node's ancestors, or an input's
value as the graph was compiled, is not what a read after the write sees. Writes are found by op
(a trailing underscore, the in-place operators, `out=`) and matched to values by the storage of
Dynamo's example values, which views share; a write whose target's storage is unknown counts as
a write to every tensor.

Owns: `InPlaceWrites(graph)` and its `untouched(node) -> bool`.
Must not: rewrite graphs or decide what a rewrite does with a written value (sdpa_mask.py and
causal_mask.py do).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx
from torch.multiprocessing.reductions import StorageWeakRef

from .torch_level import example_value

_INPLACE_OPERATORS = {
    operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv,
    operator.ifloordiv, operator.imod, operator.ipow, operator.iand, operator.ior,
    operator.ixor, operator.ilshift, operator.irshift,
}  # fmt: skip
_UNKNOWN = object()  # a write whose target's storage is not known: any tensor's


def _storage(node: Any) -> Any:
    """The storage of `node`'s example value (views share it), or None."""
    shown = example_value(node)
    if not isinstance(shown, torch.Tensor):
        return None
    try:
        return StorageWeakRef(shown.untyped_storage())
    except Exception:
        return None


def _written(graph: fx.Graph) -> set[Any]:
    """The storages the graph writes in place (through any view)."""
    out = set()
    for node in graph.nodes:
        if node.op not in ("call_function", "call_method") or not node.args:
            continue
        name = (
            str(node.target) if node.op == "call_method" else getattr(node.target, "__name__", "")
        )
        # `operator.and_` / `or_` / `not_` are not in place: operators by the set alone
        is_operator = getattr(node.target, "__module__", "") in ("_operator", "operator")
        inplace = name.endswith("_") and not name.endswith("__") and not is_operator
        if inplace or node.target in _INPLACE_OPERATORS or "out" in node.kwargs:
            target = node.kwargs.get("out", node.args[0])
            shown = example_value(target)
            if isinstance(target, fx.Node) and (shown is None or isinstance(shown, torch.Tensor)):
                out.add(_storage(target) or _UNKNOWN)  # (an int's `+=` writes no tensor)
    return out


class InPlaceWrites:
    """The storages `graph` writes in place, found once per graph."""

    def __init__(self, graph: fx.Graph) -> None:
        self.storages = _written(graph)

    def untouched(self, node: fx.Node) -> bool:
        """No op of the graph writes `node`'s value in place (through any view of it)."""
        return _UNKNOWN not in self.storages and _storage(node) not in self.storages
