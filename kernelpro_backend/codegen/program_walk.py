"""Walks over a row program's references shared by the Triton and CUDA row templates.

Owns: `needed_refs` (what the stores depend on), `reduction_ready` (whether a reduction's
per-element operand reads only per-row values already computed), the two questions both
templates ask to order a program into column passes, `online_pairs` (a max and the sum of
exp(y - max) one pass can compute together) and `variance_pairs` (a sum and the sum of squared
deviations from its mean, likewise).
Must not: emit source.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import Any

REDUCTIONS = ("sum", "max", "min", "gather", "argmax", "argmin")
ARG_REDUCTIONS = ("argmax", "argmin")  # the column of the first extreme (NaN counts as one)
FULL = 2  # the level of a per-element value (0: scalar, 1: per row)
# ("index", (("c", index),), "int64"): the value of an index expression over the domain at the
# element (an iota: the column a one-hot compares with), computed, not loaded
INDEX = "index"
# ("piece_load", (("L", i), ("c", ((index, lo, hi), ...))), dtype): load i, read only where each
# lo <= index < hi holds (a cat's piece, and the pieces around it: its value elsewhere is
# dropped). Its address is in bounds everywhere, so a renderer may read it as the plain load;
# the mask saves the other pieces' reads.
PIECE_LOAD = "piece_load"


def needed_refs(spec: Any) -> set[Any]:
    """Loads and ops the stores depend on."""
    seen: set[Any] = set()
    stack = [s[0] for s in spec.stores]
    while stack:
        r = stack.pop()
        if r in seen or r[0] == "c":
            continue
        seen.add(r)
        if r[0] == "T":
            stack.extend(spec.ops[r[1]][1])
    return seen


def reduction_ready(
    spec: Any, args: tuple[Any, ...], known: Container[Any], level: Callable[[Any], int]
) -> bool:
    """Whether a reduction over `args` can run now: every per-row value its per-element operand
    (and its gather index) reads is in `known`, computed outside the column loops."""
    stack = list(args)
    seen: set[Any] = set()
    while stack:
        ref = stack.pop()
        if ref[0] == "c" or ref in seen or ref in known:
            continue
        seen.add(ref)
        if ref[0] == "L":
            if level(ref) != FULL:
                return False  # per-row loads are emitted up front; one missing is not ready
            continue
        if ref[0] != "T":
            continue
        op, op_args, _ = spec.ops[ref[1]]
        if op in REDUCTIONS or level(ref) != FULL:
            return False  # a per-row value not computed yet
        stack.extend(op_args)
    return True


def ref_levels(spec: Any, load_level: Callable[[Any], int]) -> dict[Any, int]:
    """The level of every load (by `load_level` of its index) and op: a reduction is per row,
    any other op the highest level of its operands."""
    levels = {("L", i): load_level(idx) for i, (_, _, idx) in enumerate(spec.loads)}
    levels[("A", 0)] = FULL  # a GEMM or attention accumulator tile
    for i, (op, args, _) in enumerate(spec.ops):
        if op == INDEX:  # the element's index: as varying as the index expression
            levels[("T", i)] = load_level(args[0][1])
            continue
        lv = max((0 if a[0] == "c" else levels[a] for a in args), default=0)
        levels[("T", i)] = 1 if op in REDUCTIONS else lv
    return levels


def ref_dtype(spec: Any, ref: Any, constant: str = "float32") -> str:
    """The dtype a load or op produces; `constant` for a literal."""
    if ref[0] == "L":
        return str(spec.inputs[spec.loads[ref[1]][0]][2])
    if ref[0] == "T":
        return str(spec.ops[ref[1]][2])
    return constant


def _made_by(spec: Any, ref: Any, ops: tuple[str, ...]) -> tuple[Any, ...] | None:
    """The arguments of the op that makes `ref` when it is one of `ops`, else None."""
    if ref[0] != "T" or spec.ops[ref[1]][0] not in ops:
        return None
    return tuple(spec.ops[ref[1]][1])


def _difference(spec: Any, s: int, inner: tuple[str, ...]) -> tuple[Any, Any] | None:
    """(y, m) where reduction `s` sums inner(y - m) (one op of `inner` around the difference;
    for mul, its two arguments the same), m an op's result; else None."""
    op, args, _ = spec.ops[s]
    if op != "sum" or (outer := _made_by(spec, args[0], inner)) is None:
        return None
    arg = args[0]
    op = spec.ops[arg[1]][0]
    if (op == "mul" and outer[0] != outer[-1]) or (op == "pow" and outer[-1] != ("c", 2)):
        return None  # not a square
    diff = _made_by(spec, outer[0], ("sub",))
    if diff is None or len(diff) != 2 or diff[1][0] != "T":
        return None
    return diff[0], diff[1]


def online_pairs(spec: Any, reductions: list[int]) -> dict[int, int]:
    """max reduction -> the sum of exp(y - that max) over the same y: the pair a softmax,
    log-softmax or log-sum-exp makes, which one column pass can compute together."""
    pairs: dict[int, int] = {}
    for s in reductions:
        found = _difference(spec, s, ("exp",))
        if found is None:
            continue
        y, (_, m) = found
        m_op, m_args, _ = spec.ops[m]
        if m in reductions and m_op == "max" and m_args[0] == y and m not in pairs:
            pairs[m] = s
    return pairs


def variance_pairs(spec: Any, reductions: list[int], n_cols: int) -> dict[int, int]:
    """sum(y) -> the sum of (y - sum(y) / n)**2 over the same y and the row's n columns: the
    pair a variance, a batch norm's or a layer norm's statistics make, which one column pass
    can compute together (Welford's running mean and sum of squared deviations)."""
    pairs: dict[int, int] = {}
    for s in reductions:
        found = _difference(spec, s, ("mul", "pow"))
        if found is None:
            continue
        y, mean = found
        quotient = _made_by(spec, mean, ("div",))
        if quotient is None or quotient[0][0] != "T" or quotient[1:] != (("c", n_cols),):
            continue
        a = quotient[0][1]
        a_op, a_args, _ = spec.ops[a]
        if a in reductions and a_op == "sum" and a_args[0] == y and a not in pairs:
            pairs[a] = s
    return pairs
