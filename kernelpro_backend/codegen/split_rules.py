"""Which row programs run as split rows (templates/rowsplit.py): the legality knobs.py checks.

Owns: `split_problem(spec)` (why a program cannot run split, or None), `validate_split` (its
knobs) and `chunk_columns`.
Must not: render source (templates/rowsplit.py) or import spec.py (knobs.py calls this).
"""

from __future__ import annotations

from typing import Any

from .cluster_rules import level_of
from .domain import extent, next_pow2, rows_cols
from .errors import IllegalSpec
from .program_walk import FULL, REDUCTIONS, ref_levels, variance_pairs

SPLIT_OPS = ("sum", "max", "min")
# the row template computes 16-bit values in float32 (emitter.py): partials are float32 for all
FLOAT_DTYPES = ("float32", "bfloat16", "float16")


def reductions_of(spec: Any) -> list[int]:
    return [i for i, (op, _, _) in enumerate(spec.ops) if op in REDUCTIONS]


def _feeds_on_reduction(spec: Any, ref: Any) -> bool:
    stack, seen = [ref], set()
    while stack:
        r = stack.pop()
        if r[0] != "T" or r in seen:
            continue
        seen.add(r)
        op, args, _ = spec.ops[r[1]]
        if op in REDUCTIONS:
            return True
        stack.extend(args)
    return False


def split_problem(spec: Any) -> str | None:
    """Why `spec`'s program cannot run as split rows; None when it can: every reduction a
    float sum, max or min of per-element values no other reduction feeds (one wave; a
    variance's sum of squared deviations from its sum's mean is computed in that sum's pass).
    Outputs may be per row or per element (the combining kernel writes those over its
    chunk)."""
    _, cols = rows_cols(spec)
    reductions = reductions_of(spec)
    if not reductions:
        return "the program reduces nothing"
    levels = ref_levels(spec, lambda idx: level_of(spec, idx, cols))
    squares = variance_pairs(spec, reductions, extent(spec, cols)).values()
    for i in reductions:
        if i in squares:
            continue  # a variance's squared deviations: computed in its sum's pass (Welford)
        op, args, dtype = spec.ops[i]
        if op not in SPLIT_OPS or dtype not in FLOAT_DTYPES:
            return f"a {op} reduction to {dtype}: split rows combine float sums, maxima, minima"
        if _feeds_on_reduction(spec, args[0]):
            return "a reduction of another reduction's result: the row is walked twice"
        if args[0][0] == "c" or levels[args[0]] != FULL:
            return "a reduction of a value constant along the row"
    return None


def chunk_columns(spec: Any) -> int:
    """Columns per program: the row over SPLIT, rounded up to whole BLOCK_C blocks."""
    n_cols = extent(spec, rows_cols(spec)[1])
    split, block = int(spec.knob("SPLIT")), int(spec.knob("BLOCK_C"))
    per_program = -(-n_cols // split)
    return -(-per_program // block) * block


def validate_split(spec: Any, k: dict[str, Any]) -> None:
    """Raise IllegalSpec unless `spec` runs split with knobs `k`."""
    problem = split_problem(spec)
    if problem:
        raise IllegalSpec(f"row_split cannot compute this program: {problem}")
    n_cols = extent(spec, rows_cols(spec)[1])
    if k["BLOCK_C"] * k["SPLIT"] > next_pow2(n_cols):
        raise IllegalSpec(
            f"SPLIT={k['SPLIT']} programs of BLOCK_C={k['BLOCK_C']} columns each exceed the "
            f"{n_cols}-column row: use a smaller SPLIT or BLOCK_C"
        )
    if k["BLOCK_C"] < 32 * k["num_warps"] and k["num_warps"] > 1:
        raise IllegalSpec(
            f"num_warps={k['num_warps']} leaves threads idle on BLOCK_C={k['BLOCK_C']}; use "
            f"num_warps <= {max(1, k['BLOCK_C'] // 32)}"
        )
