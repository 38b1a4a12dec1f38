"""Inlining a kernel into the aten graph, so Inductor launches it from its own generated code.

Owns: tracing a traceable kernel (its launches wrapped by `torch.library.wrap_triton`) under
functionalization into FX nodes (`aten.empty_strided`, `triton_kernel_wrapper_functional`), and
splicing those nodes into the graph in place of one subgraph.
Must not: choose kernels or partition graphs (graph.py does).

Why: a kernel behind the opaque `kernelpro::launch` op costs about 80 us of host time per call
(custom-op dispatch plus Triton's Python launcher; BENCHMARKS.md), more than most fused kernels
take on the GPU. Inlined, Inductor emits the launch in its wrapper code like its own kernels.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import torch
import torch.fx as fx

from ..fx_passes import Subgraph
from . import access_memo

# The higher-order op a traced Triton launch becomes; Inductor lowers it to a kernel call.
_TRITON_HOP = "triton_kernel_wrapper_functional"
# kernelpro's own ops a traced kernel may call (ops/cutlass_gemm.py, ops/cutlass_conv.py), by
# name: registered on import
_KERNEL_OPS = {"kernelpro.cutlass_gemm.default", "kernelpro.cutlass_conv.default"}


class InlineError(Exception):
    """The kernel could not be traced into the graph; the caller falls back to the opaque op."""


@runtime_checkable
class TraceableKernel(Protocol):
    name: str

    def traceable(self) -> Callable[..., Sequence[torch.Tensor]]: ...


def trace_kernel(kernel: TraceableKernel, subgraph: Subgraph) -> fx.GraphModule:
    """Trace `kernel` on the fake values of the subgraph's inputs, in the graph's fake mode."""
    from torch._guards import detect_fake_mode
    from torch._subclasses.functional_tensor import dispatch_functionalize
    from torch.fx.experimental.proxy_tensor import make_fx

    if os.environ.get("TRITON_INTERPRET") == "1":
        raise InlineError(
            "Triton's interpreter (TRITON_INTERPRET=1) launches kernels eagerly and cannot be traced"
        )
    access_memo.install()  # one access analysis per kernel, not per site (access_memo.py)
    vals = [p.meta.get("val") for p in subgraph.inputs]
    if any(not isinstance(v, torch.Tensor) for v in vals):
        raise InlineError("an input has no fake tensor value")
    fake_mode = detect_fake_mode(vals)
    if fake_mode is None:
        raise InlineError("the graph's inputs carry no fake mode")
    try:
        with fake_mode:
            traced = make_fx(dispatch_functionalize(kernel.traceable()))(*vals)
    except Exception as e:  # any tracing failure: report it, the opaque op still works
        raise InlineError(f"tracing failed: {type(e).__name__}: {e}") from e
    traced.graph.eliminate_dead_code()  # getitems of the inputs a launch only reads
    _check_traced(traced, subgraph)
    return traced


def _check_traced(traced: fx.GraphModule, subgraph: Subgraph) -> None:
    """Only allocations, views, Triton launches, kernelpro's kernel ops and getitems, and
    outputs with the promised layout."""
    allowed = {
        torch.ops.aten.empty_strided.default,
        torch.ops.aten.empty.memory_format,  # scratch: a conv template's packed operands
        torch.ops.aten.zero.default,
        torch.ops.aten.zeros_like.default,
        torch.ops.aten.as_strided.default,  # an operand's view (a CUTLASS GEMM's B)
        operator.getitem,
    }
    for node in traced.graph.nodes:
        if node.op != "call_function" or str(node.target) in _KERNEL_OPS:
            continue
        if node.target not in allowed and getattr(node.target, "__name__", "") != _TRITON_HOP:
            raise InlineError(f"traced kernel contains {node.target}, not just launches")
    outs = _outputs(traced)
    if len(outs) != len(subgraph.outputs):
        raise InlineError(
            f"kernel returns {len(outs)} outputs, subgraph has {len(subgraph.outputs)}"
        )
    for i, (node, want) in enumerate(zip(outs, subgraph.outputs, strict=True)):
        got, ref = node.meta.get("val"), want.meta["val"]
        if not isinstance(got, torch.Tensor) or (
            tuple(got.shape),
            tuple(got.stride()),
            got.dtype,
        ) != (tuple(ref.shape), tuple(ref.stride()), ref.dtype):
            raise InlineError(f"output {i} does not have the subgraph's shape, stride and dtype")


def _outputs(traced: fx.GraphModule) -> list[fx.Node]:
    out = next(n for n in traced.graph.nodes if n.op == "output")
    value = out.args[0]
    if isinstance(value, fx.Node):
        return [value]
    return list(value)


def splice(
    gm: fx.GraphModule, subgraph: Subgraph, traced: fx.GraphModule, remap: dict[fx.Node, fx.Node]
) -> None:
    """Replace the subgraph's nodes in `gm` by a copy of `traced`'s nodes. `remap` maps outputs of
    subgraphs replaced earlier to the nodes that now stand for them (extended here)."""
    graph = gm.graph
    members = set(subgraph.nodes)
    order = {n: i for i, n in enumerate(graph.nodes)}
    last = max(subgraph.nodes, key=order.__getitem__)
    placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
    env: dict[fx.Node, Any] = {
        ph: remap.get(p, p) for ph, p in zip(placeholders, subgraph.inputs, strict=True)
    }
    anchor = last.next
    with graph.inserting_before(anchor):
        for node in traced.graph.nodes:
            if node.op in ("placeholder", "output"):
                continue
            env[node] = graph.node_copy(node, lambda n: env[n])
    for out, node in zip(subgraph.outputs, _outputs(traced), strict=True):
        new = env[node]
        if "tensor_meta" in out.meta:
            new.meta["tensor_meta"] = out.meta["tensor_meta"]
        out.replace_all_uses_with(new, delete_user_cb=lambda user: user not in members)
        remap[out] = new
    for n in reversed(subgraph.nodes):
        graph.erase_node(n)
