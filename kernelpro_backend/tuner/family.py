"""Winners of other sizes of one symbolic subgraph, as hints for a search at a new size:
their configurations, which power-of-two bucket a size falls in, how far two sizes are apart.

Owns: `spec_config`, `same_buckets`, `size_distance`. Must not: read the cache or search
(finder.py picks the hints with these).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any


def spec_config(spec_json: str | None) -> tuple[str, tuple[Any, ...]] | None:
    """(template, knobs as (name, value) pairs) of a stored KernelSpec JSON, or None."""
    if not spec_json:
        return None
    try:
        raw = json.loads(spec_json)
        knobs = tuple((str(k), v) for k, v in raw.get("knobs", ()))
        return str(raw["template"]), knobs
    except (ValueError, KeyError, TypeError):
        return None


def _bucket(n: int) -> int:
    """The power-of-two bucket (2**(b-1), 2**b] of a size: its b."""
    return max(n - 1, 0).bit_length()


def same_buckets(sizes: Sequence[Sequence[int]], metas: Sequence[Sequence[Any]]) -> bool:
    """Whether every dim of two instances' inputs falls in the same power-of-two bucket."""
    return all(
        len(shape) == len(meta[0])
        and all(_bucket(a) == _bucket(b) for a, b in zip(shape, meta[0], strict=True))
        for shape, meta in zip(sizes, metas, strict=True)
    )


def size_distance(sizes: Sequence[Sequence[int]], metas: Sequence[Sequence[Any]]) -> float:
    """How far two instances' input sizes are apart: the summed |log2| ratio of their dims."""
    total = 0.0
    for shape, meta in zip(sizes, metas, strict=False):
        for a, b in zip(shape, meta[0], strict=False):
            total += abs(math.log2(max(a, 1) / max(b, 1)))
    return total
