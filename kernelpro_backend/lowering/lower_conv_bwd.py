"""Lowering a convolution backward subgraph (aten.convolution_backward, its gradients picked by
getitem, and the pointwise tail on the input gradient) to a "conv_backward" spec
(codegen/templates/conv_bwd.py), or a "conv_depthwise_backward" one (templates/conv_dw_bwd.py,
direct, IEEE float32 arithmetic) where each group reads one input channel.

Owns: reading the backward's operands (output gradient, input, weight: through their strides),
its geometry, which gradients it returns (output_mask) and where each one goes: the input
gradient and its tail over the domain (N, C_in, H, W) as the spec's stores, the weight and bias
gradients as ("A", 1) / ("A", 2) stores the template writes itself.
Must not: render source; transposed and 3-D convolutions and other dtypes raise `Unsupported`.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx

from ..codegen.errors import Unsupported
from ..fx_passes import Subgraph
from ..fx_passes.ops import Role, op_name, role
from .anchor import anchored_program
from .lower_conv import as_2d, as_2d_shape, pair
from .maps import shape
from .operands import bound_args, operand
from .program import ProgramBuilder

BACKWARD = "aten::convolution_backward"


def lower_conv_backward(sg: Subgraph) -> dict[str, Any]:
    """The fields of the spec computing a convolution backward subgraph."""
    nodes = [n for n in sg.nodes if op_name(n) == BACKWARD]
    if len(nodes) != 1:
        raise Unsupported(
            f"{len(nodes)} convolution backwards in one subgraph; the template takes one"
        )
    node = nodes[0]
    args = bound_args(node)
    dy, x, w = args["grad_output"], args["input"], args["weight"]
    if args.get("transposed"):
        raise Unsupported("transposed convolutions have no backward template")
    x_val, w_val, dy_val = x.meta["val"], w.meta["val"], dy.meta["val"]
    if x_val.dim() not in (3, 4):
        raise Unsupported(
            f"a {x_val.dim() - 2}-D convolution: the conv templates take 1-D and 2-D ones; it "
            "runs on the fallback (cuDNN)"
        )
    dtypes = {x_val.dtype, w_val.dtype, dy_val.dtype}
    if len(dtypes) != 1 or x_val.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise Unsupported(
            f"convolution backward of {sorted(map(str, dtypes))}: need one float dtype"
        )
    groups = int(args["groups"])
    # one input channel a group: the direct template, in IEEE float32 FMAs as the forward's
    depthwise = int(x_val.shape[1]) == groups and groups > 1
    picks = {u: int(u.args[1]) for u in node.users if u.target is operator.getitem}  # type: ignore[arg-type]
    if any(role(u) is not Role.GETITEM for u in node.users):
        raise Unsupported("convolution_backward's tuple is used whole")
    dx_node = next((u for u, i in picks.items() if i == 0), None)
    grads, dx_outputs, grad_casts = [], [], set()
    for j, o in enumerate(sg.outputs):
        which = _gradient(o, picks)
        if which is not None:
            grads.append((which, j))
            if o not in picks:
                grad_casts.add(o)
        else:
            dx_outputs.append(o)
    if dx_outputs and dx_node is None:
        raise Unsupported(
            "an output of the convolution backward is neither the weight's or bias's gradient "
            "(or one cast of it) nor over the input gradient, which is not computed"
        )
    flat = x_val.dim() == 3
    domain = shape(dx_node) if dx_node is not None else tuple(int(s) for s in x_val.shape)
    prog = None
    if dx_outputs and dx_node is not None:  # (else refused above)
        prog = _input_gradient(sg, node, dx_node, dx_outputs, domain, grad_casts)
    by_output = {j: which for which, j in grads}
    stores = [
        (("A", by_output[j]), 0, (), ()) if j in by_output else prog.store(o)  # type: ignore[union-attr]
        for j, o in enumerate(sg.outputs)
    ]
    anchor = (
        ("x", as_2d(operand(x, sg), flat)),
        ("weight", as_2d(operand(w, sg), flat)),
        ("grad_out", as_2d(operand(dy, sg), flat)),
        ("x_shape", as_2d_shape(x_val.shape, flat)),
        ("c_out", int(w_val.shape[0])),
        ("kernel", as_2d_shape(w_val.shape, flat)[2:]),
        ("out_hw", as_2d_shape(dy_val.shape, flat)[2:]),
        ("stride", pair(args["stride"], flat, 1)),
        ("padding", pair(args["padding"], flat, 0)),
        ("dilation", pair(args["dilation"], flat, 1)),
        ("groups", groups),
        ("operand_dtype", str(x_val.dtype).removeprefix("torch.")),
        ("grads", tuple(grads)),
    )
    return dict(
        template="conv_depthwise_backward" if depthwise else "conv_backward",
        **({"precision": "ieee"} if depthwise else {}),
        domain=tuple(domain),
        reduced=(),
        loads=tuple(prog.loads) if prog else (),
        ops=tuple(prog.ops) if prog else (),
        stores=tuple(stores),
        anchor=anchor,
    )


def _gradient(out: fx.Node, picks: dict[fx.Node, int]) -> int | None:
    """1 or 2 when `out` is the weight's or the bias's gradient, or one dtype cast of it (the
    float32 gradient of a parameter autocast ran in bfloat16); else None. The template rounds
    each gradient to the operands' dtype before its output's (conv_bwd.grad_value)."""
    if out not in picks and out.target in _CASTS and len(out.args) >= 1:
        src = out.args[0]
        if isinstance(src, fx.Node) and len(src.users) == 1 and set(out.kwargs) <= {"dtype"}:
            out = src
    which = picks.get(out)
    return which if which in (1, 2) else None


# One dtype cast of a gradient, as AOTAutograd traces a bfloat16 gradient's cast to float32.
_CASTS = (torch.ops.prims.convert_element_type.default, torch.ops.aten._to_copy.default)


def _input_gradient(
    sg: Subgraph,
    node: fx.Node,
    dx: fx.Node,
    outputs: list[fx.Node],
    domain: Any,
    grad_casts: set[fx.Node],
) -> ProgramBuilder:
    """The program of the input gradient's tail: the gradient ("A", 0) over its domain, the
    subgraph's pointwise ops on it, its outputs' stores (not the weight's and bias's gradients'
    casts, which the template stores)."""
    _, _, prog = anchored_program(sg, dx, domain, (), outputs, "the input gradient")
    prog.refs[dx] = ("A", 0)
    for n in sg.nodes:
        if n is node or n in grad_casts:
            continue
        if not (n.target is operator.getitem and n.args[0] is node):
            prog.add_node(n)
    return prog
