"""Which tensors are SDPA masks a compiled graph proved constant: what a later graph may rely on
when such a mask reaches it across a graph break.

A graph whose output is a mask built from positions alone (sdpa_mask.py: every ancestor a call,
none a graph input, evaluated when the graph is compiled) writes the same values on every call.
When Dynamo breaks the graph between building the mask and using it (BART's and Whisper's
LayerDrop draw, `torch.rand([]) < p`, before each layer), the later graph reads the mask as an
input, whose value it cannot know. So the compiled producer registers each such output object
at run time with what it was proved to be (`ProvenMask`); a later graph compiled while one of
its inputs is registered may drop that SDPA mask (or make it causal), and checks on each call,
on the host, that the tensor it is passed is still a registered mask of that kind, unwritten
since (version counter, storage, shape, strides, dtype: a few µs, no device read), else it runs
the graph compiled without the reliance (rewrite/guarded.py).

Only the registered object itself is proven: a view, a copy or a cast made eagerly between the
graphs is a new tensor, not registered (Dynamo hands the later graph the very object the earlier
one returned: checked on BART and Whisper, torch 2.13). The registry holds the tensors weakly,
keyed by identity: a dead mask's entry goes with it, and a new tensor at its address is not it.
An inference tensor (made under `torch.inference_mode()`) has no version counter, so an
in-place write to it would go unseen: it is never registered.

Owns: `ProvenMask`, `register(t, fact)`, `proven(t) -> ProvenMask | None`, the placeholder
mark a rewrite leaves where it relied on one (`rely_on`, `relied_masks`).
Must not: evaluate masks or rewrite graphs (sdpa_mask.py does) or wrap compiled graphs
(rewrite/guarded.py does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch.utils.weak import WeakIdKeyDictionary

ALL, CAUSAL = "attends everywhere", "is causal"
_MARK = "proven_mask"  # a placeholder's meta key: the ProvenMask a rewrite relied on


@dataclass(frozen=True)
class ProvenMask:
    """An SDPA mask's value as proved when the graph that makes it was compiled: `ALL` (every
    entry attends: True, or 0 in an additive mask) or `CAUSAL` (square in its last two dims,
    attending exactly on and below the diagonal), with its shape and dtype."""

    kind: str
    shape: tuple[int, ...]
    dtype: torch.dtype


# The process's proven masks: tensor (weakly, by identity) -> (fact, the tensor's state when
# registered). One registry for all compiles: a mask made by one model's graph may be read by
# a graph that another compile made (Dynamo compiles each frame after a break on its own).
_PROVEN: Any = WeakIdKeyDictionary()


def _state(t: torch.Tensor) -> tuple[Any, ...]:
    """What an in-place write, `.data =` or a metadata change would alter."""
    return (t._version, t.data_ptr(), t.shape, t.stride(), t.dtype)


def register(t: Any, fact: ProvenMask) -> None:
    """`t` (a graph's output, as returned) holds the values `fact` says, as of now."""
    if not isinstance(t, torch.Tensor) or t.is_inference():
        return  # no version counter: an in-place write would go unseen
    _PROVEN[t] = (fact, _state(t))


def proven(t: Any) -> ProvenMask | None:
    """What `t` was proved to hold, if it is a registered mask unwritten since; else None."""
    entry = _PROVEN.get(t) if isinstance(t, torch.Tensor) else None
    if entry is None:
        return None
    fact, state = entry
    return fact if _state(t) == state else None


def rely_on(placeholder: fx.Node, fact: ProvenMask) -> None:
    """Mark `placeholder` as an input the rewritten graph relies on being a `fact` mask."""
    placeholder.meta[_MARK] = fact


def relied_masks(gm: fx.GraphModule) -> dict[fx.Node, ProvenMask]:
    """The placeholders of `gm` a rewrite relied on being proven masks, with what they were."""
    return {n: n.meta[_MARK] for n in gm.graph.nodes if n.op == "placeholder" and _MARK in n.meta}
