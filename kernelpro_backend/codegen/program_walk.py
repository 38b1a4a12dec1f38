"""Walks over a row program's references shared by the Triton and CUDA row templates.

Owns: `needed_refs` (what the stores depend on), `reduction_ready` (whether a reduction's
per-element operand reads only per-row values already computed), the two questions both
templates ask to order a program into column passes, and `online_pairs` (a max and the sum of
exp(y - max) one pass can compute together).
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


def online_pairs(spec: Any, reductions: list[int]) -> dict[int, int]:
    """max reduction -> the sum of exp(y - that max) over the same y: the pair a softmax,
    log-softmax or log-sum-exp makes, which one column pass can compute together."""
    pairs: dict[int, int] = {}
    for s in reductions:
        op, args, _ = spec.ops[s]
        if op != "sum" or args[0][0] != "T":
            continue
        e_op, e_args, _ = spec.ops[args[0][1]]
        if e_op != "exp" or e_args[0][0] != "T":
            continue
        d_op, d_args, _ = spec.ops[e_args[0][1]]
        if d_op != "sub" or len(d_args) != 2 or d_args[1][0] != "T":
            continue
        m = d_args[1][1]
        m_op, m_args, _ = spec.ops[m]
        if m in reductions and m_op == "max" and m_args[0] == d_args[0] and m not in pairs:
            pairs[m] = s
    return pairs
