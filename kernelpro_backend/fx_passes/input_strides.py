"""An aten graph's values at the strides its inputs really arrive at.

AOTAutograd traces the backward graph with the strides eager would give the saved activations,
then hands the backward compiler inputs restrided to what the compiled forward returned
(graph_compile.py: "saved activations can have different stride to eager if the compiler does
layout optimization"). The graph's `meta["val"]` keeps the traced strides. In a channels-last
training step (Inductor lays a CNN's forward NHWC) the backward's saved activations arrive NHWC
while the graph says NCHW, and so does every value computed from them. A kernel specialised to
the graph's strides then got inputs at other strides: Inductor copied each to the promised
strides before the kernel, on every call, and the search had timed kernel and fallback on
layouts the step never runs.

Owns: `match_input_strides(gm, inputs)`: where a placeholder's static strides differ from its
example input's, the graph's values are propagated again (FakeTensorProp) from the inputs as
they arrive, so that subgraph keys, kernel specs and the fallback's baselines all see them.
Must not: change a graph's nodes, or touch a graph with symbolic sizes (Inductor lays those
out as traced: layout optimisation is off for dynamic shapes).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx as fx

log = logging.getLogger("kernelpro")


def match_input_strides(gm: fx.GraphModule, inputs: Sequence[Any]) -> list[str]:
    """Propagate `gm`'s values again where a placeholder's example input has other strides
    than its `meta["val"]`. Returns the names of the placeholders restrided ([] where none
    differs, the sizes are symbolic or the propagation failed; the graph's metas are then as
    they were, and a failure is logged)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(inputs):
        return []
    vals = [n.meta.get("val") for n in placeholders]
    if not all(_static(v) for v in vals) or not all(_static(x) for x in inputs):
        return []
    args, moved = [], []
    for node, val, x in zip(placeholders, vals, inputs, strict=True):
        if _restridable(val, x) and tuple(val.stride()) != tuple(x.stride()):
            val = val.as_strided(val.shape, x.stride(), val.storage_offset())
            moved.append(node.name)
        args.append(val)
    if not moved:
        return []
    from torch._guards import detect_fake_mode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    mode = detect_fake_mode(vals)
    if mode is None:
        return []
    saved = {n: n.meta.get("val") for n in gm.graph.nodes}
    try:
        FakeTensorProp(gm, mode=mode).propagate_dont_convert_inputs(*args)
    except Exception as e:  # an op without a fake kernel for these strides: keep the traced ones
        for n, v in saved.items():
            n.meta["val"] = v
        log.warning(
            "the graph's values were left at their traced strides, though %d input(s) arrive "
            "at others (%s): propagating them failed: %s",
            len(moved),
            ", ".join(moved[:4]),
            e,
        )
        return []
    log.debug("restrided %d graph input(s) as they arrive: %s", len(moved), ", ".join(moved))
    return moved


def _static(x: Any) -> bool:
    """A non-tensor, or a tensor whose sizes and strides are all plain ints."""
    if not isinstance(x, torch.Tensor):
        return True
    return all(isinstance(s, int) for s in (*x.shape, *x.stride()))


def _restridable(val: Any, x: Any) -> bool:
    """Whether `val` (the graph's) may take `x`'s strides: both tensors of one shape and dtype,
    both dense (so one storage holds either)."""
    if not isinstance(val, torch.Tensor) or not isinstance(x, torch.Tensor):
        return False
    if val.shape != x.shape or val.dtype != x.dtype:
        return False
    return _dense(val) and _dense(x)


def _dense(x: torch.Tensor) -> bool:
    """Whether `x`'s elements fill its extent once each (some order of its dims is
    contiguous)."""
    expected = 1
    dims = sorted(((t, s) for s, t in zip(x.shape, x.stride(), strict=True) if s != 1))
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True
