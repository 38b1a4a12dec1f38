"""Which knobs the row template (and the pointwise one) can run a program with.

Owns: `validate_rowwise(spec, knobs)` (tile limits, and the loop forms ONLINE=block and
VARIANCE=welford only where the column loop has their pair), `variance_loop`.
Must not: import spec.py (knobs.py calls this) or render anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .domain import extent, next_pow2, rows_cols
from .errors import IllegalSpec

if TYPE_CHECKING:
    from .spec_view import SpecView

MAX_TILE_ELEMENTS = 65536  # per program, in registers: 64 K 32-bit registers per SM


def _online_loop(spec: SpecView, block_c: int, n_cols: int) -> bool:
    """Whether the row loops over columns with a max and the sum of exp(y - max) beside it:
    an online log-sum-exp (program_walk.online_pairs)."""
    from .program_walk import online_pairs

    sums = [i for i, (op, _, _) in enumerate(spec.ops) if op in ("sum", "max")]
    return block_c < n_cols and bool(online_pairs(spec, sums))


def variance_loop(spec: SpecView, block_c: int, n_cols: int) -> bool:
    """Whether the row loops over columns with a sum and the sum of squared deviations from
    its mean beside it (program_walk.variance_pairs)."""
    from .program_walk import variance_pairs

    sums = [i for i, (op, _, _) in enumerate(spec.ops) if op == "sum"]
    return block_c < n_cols and bool(variance_pairs(spec, sums, n_cols))


def validate_rowwise(spec: SpecView, k: dict) -> None:
    """Raise IllegalSpec unless the row template (and pointwise) can run `spec` with knobs `k`."""
    rows, cols = rows_cols(spec)
    n_cols, n_rows = extent(spec, cols), extent(spec, rows)
    tile = k["ROWS"] * k["BLOCK_C"]
    if tile > MAX_TILE_ELEMENTS:
        raise IllegalSpec(
            f"ROWS={k['ROWS']} x BLOCK_C={k['BLOCK_C']} = {tile} elements per program; the limit "
            f"is {MAX_TILE_ELEMENTS}. Reduce ROWS or BLOCK_C (long rows loop over columns)"
        )
    if k["BLOCK_C"] > max(1, next_pow2(n_cols)):
        raise IllegalSpec(
            f"BLOCK_C={k['BLOCK_C']} is wider than the {n_cols} columns; use <= {next_pow2(n_cols)}"
        )
    if k["ROWS"] > max(1, next_pow2(n_rows)):
        raise IllegalSpec(f"ROWS={k['ROWS']} exceeds the {n_rows} rows; use <= {next_pow2(n_rows)}")
    if k.get("ONLINE") == "block" and not _online_loop(spec, k["BLOCK_C"], n_cols):
        raise IllegalSpec(
            "ONLINE=block changes only a column loop's online max and sum of exp; this spec "
            "has none at this BLOCK_C: use ONLINE=lane"
        )
    if k.get("VARIANCE") == "welford" and not variance_loop(spec, k["BLOCK_C"], n_cols):
        raise IllegalSpec(
            "VARIANCE=welford changes only a column loop's sum and sum of squared deviations "
            "from its mean; this spec has none at this BLOCK_C: use VARIANCE=passes"
        )
    if tile < 32 * k["num_warps"] and k["num_warps"] > 1:
        raise IllegalSpec(
            f"num_warps={k['num_warps']} leaves threads idle on a {tile}-element tile; use "
            f"num_warps <= {max(1, tile // 32)}"
        )
