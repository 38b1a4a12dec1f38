"""Which activation a run of a spec's elementwise ops computes, found by evaluating them.

A GEMM's epilogue reaches the code generator decomposed (Inductor's decompositions turn
`F.gelu` into a cast, `x * 0.7071...`, `erf`, `+ 1`, `* 0.5 * x`, a cast back), spelled in as
many ways as there are decompositions and models. Instead of matching those spellings, the
ops are evaluated in float64 on a grid of inputs, float casts taken as exact, and compared
with each named activation: the one they equal to 1e-9 (relative) is the activation. A run
that reads anything but its input and constants, casts to an integer type, or uses an op this
evaluator does not know, is no activation.

Owns: `unary_run(ops, first, value)` (where a run of ops that depends only on `value` ends),
`activation_of(ops, first, end, value)` and `is_function_of` (the run evaluates as one).
Must not: render or decide which template computes the activation (cutlass_match.py does).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

_FLOATS = {"float16", "bfloat16", "float32", "float64"}
_UNARY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "neg": torch.neg,
    "exp": torch.exp,
    "erf": torch.erf,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "relu": torch.relu,
    "reciprocal": torch.reciprocal,
    "abs": torch.abs,
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
}
_BINARY: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
}
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "identity": lambda x: x,
    "relu": torch.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
}
_GRID = torch.cat([torch.linspace(-12.0, 12.0, 481, dtype=torch.float64), torch.tensor([0.0])])


class _NotUnary(Exception):
    pass


def _ref(arg: Any) -> tuple[str, Any]:
    return (str(arg[0]), arg[1])


def unary_run(ops: Sequence[Any], first: int, value: tuple[str, Any]) -> int:
    """The end (exclusive) of the longest run of ops from `first` that reads only `value`,
    the run's own results and constants."""
    end = first
    while end < len(ops):
        refs = [_ref(a) for a in ops[end][1]]
        if not all(
            r == value or r[0] == "c" or (r[0] == "T" and first <= r[1] < end) for r in refs
        ):
            break
        end += 1
    return end


def _evaluate(ops: Sequence[Any], first: int, end: int, value: tuple[str, Any]) -> torch.Tensor:
    results: dict[int, torch.Tensor] = {}

    def operand(arg: Any) -> torch.Tensor:
        kind, v = _ref(arg)
        if (kind, v) == value:
            return _GRID
        if kind == "T":
            return results[int(v)]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _NotUnary(f"constant {v!r}")
        return torch.tensor(float(v), dtype=torch.float64)

    for i in range(first, end):
        name, args, _ = ops[i]
        if name == "cast":
            if str(_ref(args[1])[1]) not in _FLOATS:
                raise _NotUnary("a cast to a non-float type")
            results[i] = operand(args[0])
        elif name in _UNARY and len(args) == 1:
            results[i] = _UNARY[name](operand(args[0]))
        elif name in _BINARY and len(args) == 2:
            results[i] = _BINARY[name](operand(args[0]), operand(args[1]))
        else:
            raise _NotUnary(f"op {name!r}")
    return results[end - 1] if end > first else _GRID


def is_function_of(ops: Sequence[Any], first: int, end: int, value: tuple[str, Any]) -> bool:
    """Whether ops[first:end] evaluate here as an elementwise function of `value` (one that
    uses it): the ops another template may compile as they are."""
    try:
        return _evaluate(ops, first, end, value).shape == _GRID.shape and end > first
    except _NotUnary:
        return False


def activation_of(ops: Sequence[Any], first: int, end: int, value: tuple[str, Any]) -> str | None:
    """The name in ACTIVATIONS that ops[first:end] compute from `value`, or None."""
    try:
        got = _evaluate(ops, first, end, value)
    except _NotUnary:
        return None
    if got.shape != _GRID.shape:
        return None  # a constant: the value was dropped
    for name, fn in ACTIVATIONS.items():
        want = fn(_GRID)
        if torch.allclose(got, want, rtol=1e-9, atol=1e-12, equal_nan=True):
            return name
    return None
