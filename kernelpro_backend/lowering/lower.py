"""Lowering: a partitioned `Subgraph` to a `KernelSpec` with default knobs.

Owns: matching a subgraph to a template (pointwise, row_reduction, gemm, attention), choosing
the domain the kernel iterates (the reduced input for reductions, the GEMM output for GEMMs,
the largest output for pointwise chains), and the template's anchor parameters.
Dispatches attention subgraphs to lower_attention.py (forward) and lower_attention_bwd.py
(backward), convolutions to lower_conv.py and lower_conv_bwd.py; those import neither this
module nor each other (but a backward lowerer its forward's helpers).
Must not: render source; anything no template covers raises `Unsupported`, never mis-lowers.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..codegen import index as ix
from ..codegen.defaults import default_knobs
from ..codegen.errors import IllegalSpec, Unsupported
from ..codegen.spec import KernelSpec
from ..fx_passes import Subgraph
from ..fx_passes.ops import Role, op_name, role
from .anchor import anchored_program
from .lower_attention import attention_node, lower_attention
from .lower_attention_bwd import lower_attention_backward
from .lower_conv import lower_conv
from .lower_conv_bwd import BACKWARD, lower_conv_backward
from .maps import MapBuilder, broadcast, reduction_parts, shape
from .operands import operand
from .pieces import unshared
from .program import ProgramBuilder


def lower(subgraph: Subgraph) -> KernelSpec:
    """The spec of the template that computes `subgraph`, with default knobs."""
    if subgraph.tuple_output:
        raise Unsupported(
            "an output is a tuple (a multi-output op, such as chunk's split, used outside the "
            "subgraph): no template stores one"
        )
    if subgraph.symbolic:
        raise Unsupported("the subgraph has symbolic sizes; kernels are specialised to shapes")
    if not subgraph.input_meta:
        # iota arithmetic (an MoE's expert indices): the fallback folds or computes it once,
        # and a kernel with no input has no tensor to take its device from
        raise Unsupported("the subgraph reads no tensor: a constant, left to the fallback")
    if subgraph.kind == "attention":
        att = attention_node(subgraph)
        backward = "backward" in op_name(att)
        lowerer = lower_attention_backward if backward else lower_attention
        return _finish(lowerer(subgraph, att), subgraph)
    if subgraph.kind == "gemm":
        return _finish(_lower_gemm(subgraph), subgraph)
    if subgraph.kind == "conv":
        _check_dtypes(subgraph)
        backward = any(op_name(n) == BACKWARD for n in subgraph.nodes)
        return _finish((lower_conv_backward if backward else lower_conv)(subgraph), subgraph)
    return _finish(_lower_rowwise(subgraph), subgraph)


def _finish(fields: dict[str, Any], sg: Subgraph) -> KernelSpec:
    fields.setdefault("precision", sg.precision)
    fields["inputs"] = tuple(sg.input_meta)
    fields["outputs"] = tuple(sg.output_meta)
    fields["pattern"] = sg.pattern
    fields["knobs"] = ()
    draft = KernelSpec(**fields)
    try:
        return KernelSpec(**{**fields, "knobs": default_knobs(draft)})
    except IllegalSpec as e:  # e.g. a GEMM row reduction over a row wider than any tile
        raise Unsupported(f"no legal knobs for this {draft.template}: {e}") from e


def _check_dtypes(sg: Subgraph) -> None:
    for _, _, dt in (*sg.input_meta, *sg.output_meta):
        if dt in ("float64", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2"):
            raise Unsupported(f"dtype {dt} has no template (float32, bf16, fp16, ints, bool only)")


def _lower_rowwise(sg: Subgraph) -> dict[str, Any]:
    _check_dtypes(sg)
    sg = unshared(sg)  # each shifted piece of a cat its own copy of what computes it
    reductions = [n for n in sg.nodes if role(n) is Role.REDUCTION]
    if reductions:
        src, rdims, _ = reduction_parts(reductions[0])
        domain, reduced, template = shape(src), tuple(rdims), "row_reduction"
    else:
        biggest = max(sg.outputs, key=lambda o: math.prod(shape(o)))
        domain, reduced, template = shape(biggest), (), "pointwise"
    builder = MapBuilder(sg.nodes, sg.inputs, domain, reduced)
    maps = builder.run(sg.outputs)
    prog = ProgramBuilder(
        sg.inputs, maps, builder.selections, builder.store_predicates, builder.factory_reads
    )
    for n in sg.nodes:
        prog.add_node(n)
    stores = tuple(prog.store(o) for o in sg.outputs)
    return dict(
        template=template,
        domain=domain,
        reduced=reduced,
        loads=tuple(prog.loads),
        ops=tuple(prog.ops),
        stores=stores,
    )


def _lower_gemm(sg: Subgraph) -> dict[str, Any]:
    _check_dtypes(sg)
    anchors = [n for n in sg.nodes if role(n) is Role.GEMM]
    if len(anchors) != 1:
        raise Unsupported(f"{len(anchors)} GEMMs in one subgraph; the template takes one")
    mm = anchors[0]
    name = op_name(mm).removeprefix("aten::")
    if name in ("addmm", "baddbmm"):
        bias, a, b = mm.args[:3]
    else:
        bias, (a, b) = None, mm.args[:2]
    a_in, b_in = operand(a, sg), operand(b, sg)
    a_val, b_val = a.meta["val"], b.meta["val"]  # type: ignore[union-attr]
    if a_val.dtype != b_val.dtype or a_val.dtype not in (
        torch.float32,
        torch.bfloat16,
        torch.float16,
    ):
        raise Unsupported(f"GEMM operands {a_val.dtype} x {b_val.dtype}: need one float dtype")
    domain = shape(mm)
    batched = len(domain) == 3
    m_size, n_size = domain[-2], domain[-1]
    k_size = int(a_val.shape[-1])
    has_reduction = any(role(n) is Role.REDUCTION for n in sg.nodes)
    reduced = (len(domain) - 1,) if has_reduction else ()
    builder, maps, prog = anchored_program(sg, mm, domain, reduced, sg.outputs, "the GEMM output")
    acc: tuple[str, Any] = ("A", 0)
    dt = str(mm.meta["val"].dtype).removeprefix("torch.")
    if bias is not None:
        # the bias is read like an epilogue operand: broadcast over the output tile
        ident = [ix.dim(k) for k in range(len(domain))]
        builder.give(bias, broadcast(ident, domain, shape(bias)))  # type: ignore[arg-type]
        alpha, beta = mm.kwargs.get("alpha", 1), mm.kwargs.get("beta", 1)
        if alpha != 1:
            acc = prog.emit("mul", (acc, ("c", alpha)), "float32")
        bref = prog.ref(bias)
        if beta != 1:
            bref = prog.emit("mul", (bref, ("c", beta)), dt)
        acc = prog.emit("add", (acc, bref), dt)
    prog.refs[mm] = acc
    for n in sg.nodes:
        if n is not mm:
            prog.add_node(n)
    stores = tuple(prog.store(o) for o in sg.outputs)

    def strides3(s: tuple[int, ...]) -> tuple[int, ...]:
        return s if batched else (0, *s)

    anchor = (
        ("a", (a_in[0], a_in[1], strides3(a_in[2]))),
        ("b", (b_in[0], b_in[1], strides3(b_in[2]))),
        ("batch", domain[0] if batched else 1),
        ("m", m_size),
        ("n", n_size),
        ("k", k_size),
        ("op", name),
        ("operand_dtype", str(a_val.dtype).removeprefix("torch.")),
    )
    return dict(
        template="gemm",
        domain=domain,
        reduced=reduced,
        loads=tuple(prog.loads),
        ops=tuple(prog.ops),
        stores=stores,
        anchor=anchor,
    )
