"""Lowering a convolution subgraph (aten.convolution + its pointwise tail) to a "conv" or
"conv_depthwise" spec (codegen/templates/conv.py).

Owns: reading the convolution's operands (input and weight through their strides: NCHW and
channels-last alike), its geometry (stride, padding, dilation, groups), the choice of the direct
depthwise template where each group reads one input channel, and the epilogue: the bias added
to the fp32 accumulator as addmm's is, then the subgraph's pointwise tail over the output
domain (N, C_out, OH, OW).
A 1-D convolution is lowered as a 2-D one of height 1 (its input and weight read with a height
stride of 0).
Must not: render source; transposed and 3-D convolutions and other dtypes raise `Unsupported`.
"""

from __future__ import annotations

from typing import Any

import torch

from ..codegen import index as ix
from ..codegen.errors import Unsupported
from ..fx_passes import Subgraph
from ..fx_passes.ops import Role, op_name, role
from .anchor import anchored_program
from .maps import shape
from .operands import bound_args, operand

FORWARD = ("aten::convolution", "aten::_convolution")


def lower_conv(sg: Subgraph) -> dict[str, Any]:
    """The fields of the spec computing a forward convolution subgraph."""
    convs = [n for n in sg.nodes if role(n) is Role.CONV]
    if len(convs) != 1:
        raise Unsupported(f"{len(convs)} convolutions in one subgraph; the template takes one")
    conv = convs[0]
    if op_name(conv) not in FORWARD:
        raise Unsupported(f"{op_name(conv)} has no template (left to cuDNN through the fallback)")
    args = bound_args(conv)
    x, w, bias = args["input"], args["weight"], args.get("bias")
    if args.get("transposed"):
        raise Unsupported("transposed convolutions have no template")
    x_val, w_val = x.meta["val"], w.meta["val"]
    if x_val.dim() not in (3, 4):
        raise Unsupported(
            f"a {x_val.dim() - 2}-D convolution: the conv templates take 1-D and 2-D ones; it "
            "runs on the fallback (cuDNN)"
        )
    if x_val.dtype != w_val.dtype or x_val.dtype not in (
        torch.float32,
        torch.bfloat16,
        torch.float16,
    ):
        raise Unsupported(f"convolution of {x_val.dtype} by {w_val.dtype}: need one float dtype")
    domain = shape(conv)
    builder, maps, prog = anchored_program(
        sg, conv, domain, (), sg.outputs, "the convolution's output"
    )
    acc: tuple[str, Any] = ("A", 0)
    if bias is not None:  # per output channel, added to the accumulator as addmm's bias is
        builder.give(bias, [ix.dim(1)])
        acc = prog.emit("add", (acc, prog.ref(bias)), str(x_val.dtype).removeprefix("torch."))
    prog.refs[conv] = acc
    for n in sg.nodes:
        if n is not conv:
            prog.add_node(n)
    stores = tuple(prog.store(o) for o in sg.outputs)
    groups = int(args["groups"])
    c_in, c_out = int(x_val.shape[1]), int(w_val.shape[0])
    # one input channel a group: the direct kernel, in IEEE float32 FMAs whatever the policy
    # (no tensor cores: more accurate than a tf32 policy asks)
    depthwise = c_in == groups
    flat = x_val.dim() == 3  # a 1-D convolution: a 2-D one of height 1
    anchor = (
        ("x", as_2d(operand(x, sg), flat)),
        ("weight", as_2d(operand(w, sg), flat)),
        ("x_shape", as_2d_shape(x_val.shape, flat)),
        ("c_out", c_out),
        ("kernel", as_2d_shape(w_val.shape, flat)[2:]),
        ("out_hw", as_2d_shape(domain, flat)[2:]),
        ("stride", pair(args["stride"], flat, 1)),
        ("padding", pair(args["padding"], flat, 0)),
        ("dilation", pair(args["dilation"], flat, 1)),
        ("groups", groups),
        ("operand_dtype", str(x_val.dtype).removeprefix("torch.")),
    )
    return dict(
        template="conv_depthwise" if depthwise else "conv",
        **({"precision": "ieee"} if depthwise else {}),
        domain=domain,
        reduced=(),
        loads=tuple(prog.loads),
        ops=tuple(prog.ops),
        stores=stores,
        anchor=anchor,
    )


def as_2d(op: tuple[int, int, tuple[int, ...]], flat: bool) -> tuple:
    """An operand's (input, offset, strides) with a height of stride 0 where it has none."""
    i, offset, strides = op
    return (i, offset, (*strides[:2], 0, strides[2]) if flat else strides)


def as_2d_shape(sizes: Any, flat: bool) -> tuple[int, ...]:
    out = tuple(int(s) for s in sizes)
    return (*out[:2], 1, out[2]) if flat else out


def pair(value: Any, flat: bool, height: int) -> tuple[int, int]:
    """(height, width) of a stride, padding or dilation; `height` for a 1-D convolution's."""
    values = [int(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
    if flat and len(values) == 1:
        return height, values[0]
    if len(values) == 1:
        values *= 2
    if len(values) != 2:
        raise Unsupported(f"convolution parameter {value!r} is not a pair")
    return values[0], values[1]
