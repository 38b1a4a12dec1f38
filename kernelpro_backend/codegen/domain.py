"""The row and column dimensions of a row or pointwise spec's domain.

Owns: `rows_cols(spec)` (which dims a program covers as rows and which it reduces or loops
over as columns), `extent(spec, dims)` (the elements those dims span), `next_pow2`, `cdiv`
and `NUM_SMS` (the SM count legality is judged with).
Must not: import knobs.py or any template (both read this; cluster_rules.py too, which knobs.py
calls, so this module keeps them out of a cycle).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .spec_view import SpecView

# The SMs a kernel's grid is sized and judged against where a rule needs a count before any
# launch: the H100 SXM's; the H200 has the same.
NUM_SMS = 132


def rows_cols(spec: SpecView) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(row dims, column dims) of a pointwise/row_reduction domain: a program covers ROWS rows
    and loops over columns BLOCK_C at a time. Pointwise chains use the last dim as columns."""
    dims = range(len(spec.domain))
    rows_of = ("row_reduction", "row_cluster", "row_split")
    cols = spec.reduced if spec.template in rows_of else tuple(dims)[-1:]
    return tuple(d for d in dims if d not in cols), tuple(cols)


def extent(spec: SpecView, dims: tuple[int, ...]) -> int:
    return math.prod(spec.domain[d] for d in dims)


def next_pow2(n: int) -> int:
    """The least power of two >= n (1 for n <= 1)."""
    return 1 << max(0, (int(n) - 1).bit_length())


def cdiv(a: int, b: int) -> int:
    """a / b rounded up (a grid's programs for `a` items, `b` a program)."""
    return -(-a // b)
