"""The expression language of CUDA launch headers, evaluated over tensor metadata.

Owns: `TensorMeta` (what an expression sees of a tensor), `Expr` (one expression, its syntax
checked when made) and the evaluator: numbers, + - * / // % << >>, unary minus, cdiv/min/max,
`inK`/`outK` with .shape[i], .stride(i), .numel(), .ndim, .dtype. Nothing else evaluates:
no builtins, no attribute beyond those, no imports, so a header cannot run code.
Must not: know the header's keys (source.py) or touch a device.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import CandidateLoadError


class LaunchSpecError(CandidateLoadError):
    """The launch header is missing, malformed, or does not fit the inputs it is given."""


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "cdiv": lambda a, b: -(-a // b),
    "min": min,
    "max": max,
}
_BINOPS: dict[type, Any] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.LShift: lambda a, b: a << b,
    ast.RShift: lambda a, b: a >> b,
}


@dataclasses.dataclass(frozen=True)
class TensorMeta:
    """What expressions see of a tensor: shape, strides (elements) and dtype name."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def stride(self, dim: int) -> int:
        return self.strides[dim]

    def numel(self) -> int:
        return math.prod(self.shape)


@functools.lru_cache(maxsize=4096)
def _parse_expr(text: str) -> ast.expr:
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        raise LaunchSpecError(f"expression {text!r} is not valid syntax: {e.msg}") from None
    allowed = (ast.Name, ast.BinOp, ast.UnaryOp, ast.Call, ast.Attribute, ast.Subscript)
    for node in ast.walk(tree):
        if isinstance(node, ast.expr_context | ast.UAdd | ast.USub) or type(node) in _BINOPS:
            continue
        number = isinstance(node, ast.Constant) and type(node.value) in (int, float)
        if not number and not isinstance(node, allowed):
            what = f"literal {node.value!r}" if isinstance(node, ast.Constant) else None
            raise LaunchSpecError(
                f"expression {text!r}: {what or type(node).__name__} is not allowed (numbers, "
                "+ - * / // % << >>, cdiv/min/max, inK/outK .shape[i] .stride(i) .numel() only)"
            )
    return tree


@dataclasses.dataclass(frozen=True)
class Expr:
    """One expression of the header, checked for allowed syntax when it is made."""

    text: str

    def __post_init__(self) -> None:
        _parse_expr(self.text)

    def evaluate(self, env: Mapping[str, TensorMeta]) -> Any:
        try:
            return _Evaluator(env, self.text).visit(_parse_expr(self.text))
        except LaunchSpecError:
            raise
        except (IndexError, ZeroDivisionError, TypeError, ValueError) as e:
            raise LaunchSpecError(f"expression {self.text!r} failed: {e}") from None

    def integer(self, env: Mapping[str, TensorMeta], what: str) -> int:
        value = self.evaluate(env)
        if isinstance(value, bool) or not isinstance(value, int):
            raise LaunchSpecError(f"{what} {self.text!r} is {value!r}, not an integer")
        return value


class _Evaluator(ast.NodeVisitor):
    def __init__(self, env: Mapping[str, TensorMeta], text: str) -> None:
        self.env, self.text = env, text

    def fail(self, why: str) -> LaunchSpecError:
        names = ", ".join(sorted(self.env)) or "none"
        return LaunchSpecError(f"expression {self.text!r}: {why} (tensors here: {names})")

    def generic_visit(self, node: ast.AST) -> Any:
        raise self.fail(f"{type(node).__name__} is not allowed")

    def visit_Constant(self, node: ast.Constant) -> Any:
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise self.fail(f"literal {node.value!r} is not a number")
        return node.value

    def visit_Name(self, node: ast.Name) -> Any:
        if node.id in self.env:
            return self.env[node.id]
        raise self.fail(f"unknown name {node.id!r}")

    def visit_BinOp(self, node: ast.BinOp) -> Any:
        return _BINOPS[type(node.op)](self.visit(node.left), self.visit(node.right))

    def visit_UnaryOp(self, node: ast.UnaryOp) -> Any:
        value = self.visit(node.operand)
        if isinstance(node.op, ast.USub):
            return -value
        if isinstance(node.op, ast.UAdd):
            return value
        raise self.fail(f"{type(node.op).__name__} is not allowed")

    def visit_Attribute(self, node: ast.Attribute) -> Any:
        target = self.visit(node.value)
        if not isinstance(target, TensorMeta) or node.attr not in ("shape", "ndim", "dtype"):
            raise self.fail(f"attribute .{node.attr} is not allowed")
        return getattr(target, node.attr)

    def visit_Subscript(self, node: ast.Subscript) -> Any:
        target, index = self.visit(node.value), self.visit(node.slice)
        if not isinstance(target, tuple) or not isinstance(index, int):
            raise self.fail("only .shape[i] may be indexed, by an integer")
        return target[index]

    def visit_Call(self, node: ast.Call) -> Any:
        if node.keywords:
            raise self.fail("keyword arguments are not allowed")
        if isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
            return _FUNCTIONS[node.func.id](*[self.visit(a) for a in node.args])
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("stride", "numel"):
            target = self.visit(node.func.value)
            if isinstance(target, TensorMeta):
                return getattr(target, node.func.attr)(*[self.visit(a) for a in node.args])
        raise self.fail("only cdiv/min/max, .stride(i) and .numel() may be called")
