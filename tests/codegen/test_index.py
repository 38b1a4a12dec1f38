"""Index maps of reshapes: the simplified expressions must pick the same elements as torch."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from kernelpro_backend.codegen import index as ix


def evaluate(x: ix.Index, point: tuple[int, ...]) -> int:
    total = 0
    for c, a in x:
        if a == ix.ONE:
            v = 1
        elif isinstance(a, int):
            v = point[a]
        elif a[0] == "div":
            v = evaluate(a[1], point) // a[2]
        else:
            v = evaluate(a[1], point) % a[2]
        total += c * v
    return total


@pytest.mark.parametrize(
    "domain,target",
    [
        ((32, 192), (2, 16, 3, 4, 16)),
        ((6, 10), (3, 2, 5, 2)),
        ((4, 6, 5), (24, 5)),
        ((7, 9), (63,)),
    ],
)
def test_reshape_map_matches_torch(domain: tuple[int, ...], target: tuple[int, ...]) -> None:
    ident = [ix.dim(k) for k in range(len(domain))]
    coords = ix.reshape(ident, domain, target, domain)
    back = ix.reshape(coords, target, domain, domain)
    assert back == ident  # split then merge folds back to the plain dims
    flat = torch.arange(math.prod(domain))
    src, dst = flat.reshape(domain), flat.reshape(target)
    for point in itertools.product(*(range(s) for s in domain)):
        at = tuple(evaluate(c, point) for c in coords)
        assert dst[at] == src[point]


def test_merge_of_split_dims_is_affine() -> None:
    sizes = (32, 64)
    split = ix.reshape([ix.dim(0), ix.dim(1)], sizes, (2, 16, 64), sizes)
    assert split[1] == ((1, ("mod", ((1, 0),), 16)),)
    assert ix.reshape(split, (2, 16, 64), sizes, sizes) == [ix.dim(0), ix.dim(1)]
    assert (
        ix.render(ix.add(ix.scale(split[0], 1024), ix.scale(split[1], 64)), ["m", "n"]) == "64 * m"
    )


@pytest.mark.parametrize(
    ("lo", "length", "extent"), [(0, 32, 64), (32, 32, 64), (6, 5, 11), (3, 3, 11)]
)
def test_a_piece_index_is_the_shift_into_the_piece_and_stays_in_its_bounds(lo, length, extent):
    """A cat's piece [lo, lo + length) reads its input at (c - lo) mod length, written with a
    constant term: c - lo inside the piece, in [0, length) everywhere (lowering/pieces.py)."""
    sizes = (extent, 4)
    x = ix.modulo(ix.add(ix.dim(0), ix.const(-lo % length)), length, sizes)
    names = ["c", "r"]
    for c in range(extent):
        v = evaluate(x, (c, 0))
        assert 0 <= v < length and eval(ix.render(x, names), {"c": c, "r": 0}) == v
        if lo <= c < lo + length:
            assert v == c - lo
    assert ix.max_value(ix.add(ix.dim(1), ix.const(3)), sizes) == 6
    assert ix.dims_of(ix.add(ix.dim(1), ix.const(3))) == {1}
