"""Which knobs the row template (and the pointwise one) can run a program with.

Owns: `validate_rowwise(spec, knobs)` (tile limits, the loop forms ONLINE=block and
VARIANCE=welford only where the column loop has their pair, SM_SHARE only where it caps the
grid), `variance_loop`, `contiguous_rows` (when the rows get a grid axis of their own).
Must not: import spec.py (knobs.py calls this) or render anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .domain import NUM_SMS, cdiv, extent, next_pow2, rows_cols
from .errors import IllegalSpec

if TYPE_CHECKING:
    from .spec_view import SpecView

MAX_TILE_ELEMENTS = 65536  # per program, in registers: 64 K 32-bit registers per SM
MAX_GRID_Y = 65535  # CUDA's limit on a grid's second axis


def contiguous_rows(spec: SpecView, rows: tuple[int, ...]) -> int:
    """The extent of the rows' last dim where a reduction's rows span several dims and that one
    is the domain's innermost (a mean over a middle dim: consecutive rows are consecutive
    addresses), else 0. Such rows get a grid axis of their own, so their coordinate is an
    arange Triton sees as contiguous (`row % n` hides it) and lays the tile out along it."""
    last = len(spec.domain) - 1
    if spec.template != "row_reduction" or len(rows) < 2 or rows[-1] != last:
        return 0
    inner = spec.domain[last]
    return inner if inner > 1 and extent(spec, rows) // inner <= MAX_GRID_Y else 0


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
    share = k.get("SM_SHARE", 0)
    if share and contiguous_rows(spec, rows):
        raise IllegalSpec(
            "SM_SHARE caps a one-axis grid; these rows (a reduction over a middle dim) have a "
            "grid axis of their own: use SM_SHARE=0"
        )
    # the cap is a share of the SMs the kernel launches on; a cap at or above the row blocks
    # would not change the kernel
    if share and cdiv(n_rows, k["ROWS"]) <= NUM_SMS * share // 100:
        raise IllegalSpec(
            f"SM_SHARE={share} caps the grid at {NUM_SMS * share // 100} programs; "
            f"{cdiv(n_rows, k['ROWS'])} row blocks already fit: use SM_SHARE=0 or a smaller share"
        )
    if tile < 32 * k["num_warps"] and k["num_warps"] > 1:
        raise IllegalSpec(
            f"num_warps={k['num_warps']} leaves threads idle on a {tile}-element tile; use "
            f"num_warps <= {max(1, tile // 32)}"
        )
