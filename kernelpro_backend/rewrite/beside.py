"""A second compile of one graph inside one AOTAutograd call, standing in for the first.

The in-context verdict (judged.py) compiles a graph with kernelpro's kernels and the fallback's
own graph beside it, and runs whichever wins. Inductor reports each compile's output strides
to AOTAutograd through the tracing context, which takes one report: the first compile's stays,
and AOTAutograd lays the graph's outputs by it. The second compile may lay an output otherwise:
in ConvNeXt-T's channels-last forward, the graph with its kernels and the one without gave one
saved tensor different strides (H100, 2026-12-07), and the forward went unjudged. Such an
output of the second graph is copied to the first's strides after each call (the copy is part
of what its trials time, so a verdict for it pays for it); an output whose strides are not
plain integers (symbolic sizes) cannot be, and the second compile is refused as before.

Owns: `compile_beside`. Must not: judge (judged.py) or compile anything itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch


def compile_beside(compile_graph: Callable[[], Any]) -> Any:
    """`compile_graph()` run as a second compile of the graph in the tracing context: its
    outputs laid as the first compile reported them (copied where it lays them otherwise)."""
    context = torch._guards.TracingContext.try_get()
    strides: list[Any] | None = getattr(context, "output_strides", None)
    if strides is None:
        return compile_graph()
    first = list(strides)
    strides.clear()
    try:
        compiled = compile_graph()
        if strides != first:
            compiled = Restrided(compiled, first, list(strides))
    finally:
        strides[:] = first
    return compiled


def _plain(stride: Any) -> bool:
    return isinstance(stride, tuple) and all(type(s) is int for s in stride)


class Restrided:
    """A compiled graph (called boxed: one list of inputs) whose outputs at `wanted`'s strides
    where they differ from `had`'s (its own report)."""

    _boxed_call = True

    def __init__(self, inner: Callable[..., Any], wanted: Sequence[Any], had: Sequence[Any]):
        if len(wanted) != len(had):
            raise RuntimeError(f"output strides {list(had)} against {list(wanted)}")
        self.fix: list[tuple[int, tuple[int, ...]]] = []
        for i, (w, h) in enumerate(zip(wanted, had, strict=True)):
            if w == h:
                continue
            if not (_plain(w) and _plain(h)):
                raise RuntimeError(f"output {i}'s strides {h} against {w}, not plain integers")
            self.fix.append((i, w))
        self.inner = inner

    def __call__(self, args: list[Any]) -> Any:
        outs = list(self.inner(args))
        for i, stride in self.fix:
            t = outs[i]
            if isinstance(t, torch.Tensor) and t.stride() != stride:
                laid = torch.empty_strided(t.shape, stride, dtype=t.dtype, device=t.device)
                outs[i] = laid.copy_(t)
        return outs
