"""The time of a subgraph's library calls, measured: what the roofline cannot know.

The fallback runs a subgraph's GEMMs, convolutions and attention as library calls (cuBLAS,
cuDNN, flash attention), whose efficiency varies far more than the roofline's one share of the
roofs can say: cuDNN's depthwise convolution backward ran 3-4x slower than a direct template
(H200, 2026-12-07: ConvNeXt's 7x7 at 1.106 ms, 6% of the FMA roof), cuBLAS's unaligned GEMM
path 3.5x slower than the aligned one. The warm-up's plan (tuner/plan.py) orders its searches
by estimated gain; with these times the fallback's estimate is at least what its library calls
take.

Each anchor runs eagerly, alone, on random inputs of its node's shapes, strides and dtypes (the
arguments that are not tensors as the graph gives them), timed by the caller's timer. PyTorch's own ops on tensors made here; nothing of a proposer runs.

Owns: `is_anchor`, `anchors_ms` (a subgraph's anchors' summed time by the caller's timer, or
None; warmup/planned.py times with runtime/timing.py).
Must not: time a candidate kernel (the worker does, isolated) or change the subgraph.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from ..fx_passes.ops import Role, is_attention_op, role
from ..fx_passes.subgraph import random_inputs

Timer = Callable[[Callable[[], object]], float]  # a call's time in ms

ANCHORS = (Role.GEMM, Role.CONV, Role.ATTENTION)


def is_anchor(node: fx.Node) -> bool:
    """Whether the fallback runs `node` as a library call (GEMM, convolution, attention)."""
    return is_attention_op(node) or role(node) in ANCHORS


def anchors_ms(subgraph: Any, timer: Timer) -> float | None:
    """The summed time of `subgraph`'s library calls, each timed by `timer`; None when it has
    none."""
    nodes = [n for n in subgraph.nodes if is_anchor(n)]
    if not nodes:
        return None
    device = subgraph.device
    total = 0.0
    for node in nodes:
        total += timer(_call(node, device))
    return total


def _call(node: fx.Node, device: torch.device) -> Callable[[], object]:
    """`node`'s op on random inputs of its arguments' metas."""
    args, kwargs = _arguments(node, device)
    target: Any = node.target
    return lambda: target(*args, **kwargs)


def _arguments(node: fx.Node, device: torch.device) -> tuple[Any, Any]:
    """`node`'s arguments with a random tensor of its meta for each tensor node, its value for
    any other node (a size)."""

    def value(arg: fx.Node) -> Any:
        val = arg.meta.get("val")
        if isinstance(val, torch.Tensor):
            meta = (tuple(val.shape), tuple(val.stride()), str(val.dtype).removeprefix("torch."))
            (made,) = random_inputs([meta], {}, 0, device)
            return made
        if val is None:
            raise ValueError(f"{arg.name} has no value to time {node.name} with")
        return val

    return fx.node.map_arg(node.args, value), fx.node.map_arg(node.kwargs, value)
