"""The op table: each codegen IR op as a Triton expression.

Owns: the mapping from IR op names (program.py's closed set) to Triton source, computed in
float32 (bf16/fp16 loads are widened; explicit casts round and widen back, like Inductor), and
the Triton dtype of each torch dtype name. Only stable `tl` APIs: `libdevice` is avoided
because the interpreter cannot run it (tanh and friends are written with exp).
Must not: know about templates, loops or masks.
"""

from __future__ import annotations

import math
from typing import Any

from .errors import Unsupported

TL_DTYPES = {
    "float32": "tl.float32",
    "bfloat16": "tl.bfloat16",
    "float16": "tl.float16",
    "int64": "tl.int64",
    "int32": "tl.int32",
    "int16": "tl.int16",
    "int8": "tl.int8",
    "uint8": "tl.uint8",
    "bool": "tl.int1",
}
LOW_FLOATS = ("bfloat16", "float16")


def is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def literal(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        if math.isinf(value):
            return 'float("inf")' if value > 0 else 'float("-inf")'
        if math.isnan(value):
            return 'float("nan")'
        return repr(value)
    if isinstance(value, int):
        return str(value)
    raise Unsupported(f"constant {value!r} has no Triton literal")


def _tanh(a: str) -> str:
    # 1 - 2/(exp(2a)+1): exact limits at +-inf, |error| < 1e-7 near 0
    return f"(1.0 - 2.0 / (tl.exp(2.0 * {a}) + 1.0))"


_UNARY = {
    "neg": "(-{0})",
    "exp": "tl.exp({0})",
    "log": "tl.log({0})",
    "sqrt": "tl.sqrt_rn({0})",
    "rsqrt": "tl.rsqrt({0})",
    "abs": "tl.abs({0})",
    "sigmoid": "tl.sigmoid({0})",
    "erf": "tl.erf({0})",
    "relu": "tl.where({0} < 0, 0, {0})",
    "reciprocal": "(1.0 / {0})",
    "sin": "tl.sin({0})",
    "cos": "tl.cos({0})",
    "exp2": "tl.exp2({0})",
    "log2": "tl.log2({0})",
    "floor": "tl.floor({0})",
    "ceil": "tl.ceil({0})",
    "trunc": "tl.where({0} < 0, tl.ceil({0}), tl.floor({0}))",
    "log1p": "tl.log(1.0 + {0})",
    "expm1": "(tl.exp({0}) - 1.0)",
    "sign": "tl.where({0} > 0, 1.0, tl.where({0} < 0, -1.0, 0.0))",
    "logical_not": "({0} == 0)",
    "bitwise_not": "({0} == 0)",
    "isnan": "({0} != {0})",
    "silu": "({0} * tl.sigmoid({0}))",
    "hardsigmoid": "tl.minimum(tl.maximum({0} / 6.0 + 0.5, 0.0), 1.0)",
    "hardswish": "({0} * tl.minimum(tl.maximum({0} / 6.0 + 0.5, 0.0), 1.0))",
    "gelu": "(0.5 * {0} * (1.0 + tl.erf({0} * 0.7071067811865476)))",
}
# Infix operators, spelled the same in Triton and in C (optable_cuda.py shares them).
INFIX = {
    "add": "({0} + {1})",
    "sub": "({0} - {1})",
    "mul": "({0} * {1})",
    "div": "({0} / {1})",
    "lt": "({0} < {1})",
    "le": "({0} <= {1})",
    "gt": "({0} > {1})",
    "ge": "({0} >= {1})",
    "eq": "({0} == {1})",
    "ne": "({0} != {1})",
    "bitwise_and": "({0} & {1})",
    "bitwise_or": "({0} | {1})",
}
_BINARY = {
    **INFIX,
    "maximum": "tl.maximum({0}, {1})",
    "minimum": "tl.minimum({0}, {1})",
    "logical_and": "(({0} != 0) & ({1} != 0))",
    "logical_or": "(({0} != 0) | ({1} != 0))",
    "leaky_relu": "tl.where({0} > 0, {0}, {0} * {1})",
    "pow_pos": "tl.exp2({1} * tl.log2({0}))",
    # Triton's % is C's (the sign of the dividend, truncated quotient), on integers and floats,
    # in the interpreter too (np.fmod): torch.fmod. torch.remainder takes the divisor's sign.
    "fmod": "({0} % {1})",
    "remainder": "tl.where(({0} % {1} != 0) & (({0} % {1} < 0) != ({1} < 0)), {0} % {1} + {1}, {0} % {1})",
}


def expression(op: str, args: list[str], out_dtype: str) -> str:
    """Triton source of `op` applied to already-rendered operands."""
    if op in _UNARY:
        text = _UNARY[op].format(*args)
    elif op in _BINARY:
        text = _BINARY[op].format(*args)
    elif op == "tanh":
        text = _tanh(args[0])
    elif op == "gelu_tanh":
        a = args[0]
        text = f"(0.5 * {a} * (1.0 + {_tanh(f'(0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a}))')}))"
    elif op == "mish":
        a = args[0]
        softplus = f"tl.where({a} > 20.0, {a}, tl.log(1.0 + tl.exp({a})))"
        text = f"({a} * {_tanh(softplus)})"
    elif op == "where":
        text = f"tl.where({args[0]}, {args[1]}, {args[2]})"
    elif op == "fma":
        text = f"({args[0]} * {args[1]} + {args[2]})"
    elif op == "cast":
        return cast(args[0], out_dtype)
    else:
        raise Unsupported(f"op {op!r} has no Triton expression")
    if not is_float(out_dtype) and op in ("floor", "ceil", "trunc", "sign"):
        text = f"({text}).to({TL_DTYPES[out_dtype]})"
    return text


def cast(value: str, dtype: str) -> str:
    """Round to `dtype`; low-precision floats are widened back so the math stays fp32."""
    if dtype == "bool":
        return f"({value} != 0)"
    if dtype in LOW_FLOATS:
        return f"({value}).to({TL_DTYPES[dtype]}).to(tl.float32)"
    if dtype not in TL_DTYPES:
        raise Unsupported(f"cast to {dtype} is not supported")
    return f"({value}).to({TL_DTYPES[dtype]})"
