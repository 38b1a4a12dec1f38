"""The op table for CUDA C++: each codegen IR op as a C expression.

Owns: the C type of each torch dtype name as a kernel computes it (floats in float32: bf16/fp16
are widened on load and rounded on store, as the Triton table does), C literals, and the
mapping from IR op names (program.py's closed set) to C expressions. Maximum and minimum
propagate NaN, as torch's do; exp, log, tanh and erf are the accurate CUDA math functions.
Must not: know about loops, masks or templates (templates/cluster.py does).
"""

from __future__ import annotations

import math
from typing import Any

from .errors import Unsupported
from .optable import INFIX

C_TYPES = {
    "float32": "float",
    "bfloat16": "float",
    "float16": "float",
    "int64": "long long",
    "int32": "int",
    "int16": "int",
    "int8": "int",
    "uint8": "int",
    "bool": "bool",
}
# The pointer element type of a tensor argument.
POINTER_TYPES = {
    "float32": "float",
    "bfloat16": "__nv_bfloat16",
    "float16": "__half",
    "int64": "long long",
    "int32": "int",
    "int16": "short",
    "int8": "signed char",
    "uint8": "unsigned char",
    "bool": "bool",
}


def c_type(dtype: str) -> str:
    if dtype not in C_TYPES:
        raise Unsupported(f"dtype {dtype} has no CUDA type here")
    return C_TYPES[dtype]


def c_literal(value: Any, dtype: str = "float32") -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if c_type(dtype) == "float" or isinstance(value, float):
        v = float(value)
        if math.isnan(v):
            return "__int_as_float(0x7fffffff)"
        if math.isinf(v):
            return "__int_as_float(0x7f800000)" if v > 0 else "__int_as_float(0xff800000)"
        return f"{v!r}f"
    if isinstance(value, int):
        return f"{value}LL" if dtype == "int64" else str(value)
    raise Unsupported(f"constant {value!r} has no C literal")


_UNARY = {
    "neg": "(-{0})",
    "exp": "expf({0})",
    "log": "logf({0})",
    "sqrt": "sqrtf({0})",
    "rsqrt": "rsqrtf({0})",
    "abs": "fabsf({0})",
    "sigmoid": "(1.0f / (1.0f + expf(-{0})))",
    "erf": "erff({0})",
    "relu": "({0} < 0.0f ? 0.0f : {0})",
    "reciprocal": "(1.0f / {0})",
    "sin": "sinf({0})",
    "cos": "cosf({0})",
    "exp2": "exp2f({0})",
    "log2": "log2f({0})",
    "floor": "floorf({0})",
    "ceil": "ceilf({0})",
    "trunc": "truncf({0})",
    "log1p": "log1pf({0})",
    "expm1": "expm1f({0})",
    "sign": "({0} > 0.0f ? 1.0f : ({0} < 0.0f ? -1.0f : 0.0f))",
    "logical_not": "({0} == 0)",
    "bitwise_not": "({0} == 0)",
    "isnan": "({0} != {0})",
    "silu": "({0} / (1.0f + expf(-{0})))",
    "hardsigmoid": "fminf(fmaxf({0} / 6.0f + 0.5f, 0.0f), 1.0f)",
    "hardswish": "({0} * fminf(fmaxf({0} / 6.0f + 0.5f, 0.0f), 1.0f))",
    "gelu": "(0.5f * {0} * (1.0f + erff({0} * 0.7071067811865476f)))",
    "tanh": "tanhf({0})",
    "gelu_tanh": "(0.5f * {0} * (1.0f + tanhf(0.7978845608028654f * ({0} + 0.044715f * {0} * {0} * {0}))))",
    "mish": "({0} * tanhf({0} > 20.0f ? {0} : log1pf(expf({0}))))",
}
_BINARY = {
    **INFIX,
    "maximum": "kp_max({0}, {1})",
    "minimum": "kp_min({0}, {1})",
    "logical_and": "(({0} != 0) && ({1} != 0))",
    "logical_or": "(({0} != 0) || ({1} != 0))",
    "leaky_relu": "({0} > 0.0f ? {0} : {0} * {1})",
    "pow_pos": "exp2f({1} * log2f({0}))",
}
_FLOAT_ONLY = set(_UNARY) - {"neg", "logical_not", "bitwise_not", "isnan"} | {"div", "pow_pos"}


def c_expression(op: str, args: list[str], arg_dtypes: list[str], out_dtype: str) -> str:
    """C source of `op` over already-rendered operands of the given dtypes."""
    if op in _FLOAT_ONLY and any(c_type(d) != "float" for d in arg_dtypes):
        raise Unsupported(f"{op} of {arg_dtypes} has no CUDA expression here")
    if op in _UNARY:
        return _UNARY[op].format(*args)
    if op in _BINARY:
        return _BINARY[op].format(*args)
    if op == "where":
        t = c_type(out_dtype)
        return f"({args[0]} ? ({t})({args[1]}) : ({t})({args[2]}))"
    if op == "fma":
        return f"fmaf({args[0]}, {args[1]}, {args[2]})"
    if op in ("fmod", "remainder"):  # C's % and fmodf take the dividend's sign, as torch.fmod
        fmod = (
            f"fmodf({args[0]}, {args[1]})"
            if "float" in (c_type(d) for d in arg_dtypes)
            else f"({args[0]} % {args[1]})"
        )
        if op == "fmod":
            return fmod
        return f"({fmod} != 0 && (({fmod} < 0) != ({args[1]} < 0)) ? {fmod} + {args[1]} : {fmod})"
    if op == "cast":
        return c_cast(args[0], arg_dtypes[0], out_dtype)
    raise Unsupported(f"op {op!r} has no CUDA expression")


def c_cast(value: str, src: str, dtype: str) -> str:
    """Convert to `dtype`; bf16/fp16 round to nearest even and widen back to float."""
    if dtype == "bool":
        return f"({value} != 0)"
    if dtype == "bfloat16":
        return f"__bfloat162float(__float2bfloat16_rn((float)({value})))"
    if dtype == "float16":
        return f"__half2float(__float2half_rn((float)({value})))"
    return f"({c_type(dtype)})({value})"


def c_store_value(value: str, src: str, dtype: str) -> str:
    """`value` (computed as C_TYPES[src]) converted to the element type of a `dtype` tensor."""
    if dtype == "bfloat16":
        return f"__float2bfloat16_rn((float)({value}))"
    if dtype == "float16":
        return f"__float2half_rn((float)({value}))"
    if dtype == "bool":
        return f"({value} != 0)"
    return f"({POINTER_TYPES[dtype]})({value})"


def c_load_value(value: str, dtype: str) -> str:
    """An element of a `dtype` tensor as the C type the kernel computes in."""
    if dtype == "bfloat16":
        return f"__bfloat162float({value})"
    if dtype == "float16":
        return f"__half2float({value})"
    return f"({c_type(dtype)})({value})"
