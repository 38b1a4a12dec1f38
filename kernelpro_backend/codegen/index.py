"""Index expressions: integer functions of a kernel's domain coordinates.

Owns: `Index` (a canonical sum of coef * atom, where an atom is a domain dim `d<k>`, a
floor-division / modulo of another Index, or `ONE`: a constant term, the start of a slice or
the shift into a cat's piece), the simplifications that keep reshapes of a
row-major domain affine (d0*64+d1 viewed as [2,16,64] becomes d0//16, d0%16, d1), the map of
a reshape, and rendering to Triton source. An Index is plain nested tuples, so specs holding
them are hashable and JSON-serialisable.
Must not: know about fx graphs or templates.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# Index = tuple[tuple[int, Atom], ...]  (coef, atom) sorted;
# Atom = int | ("div"|"mod", Index, int) | ONE
Index = tuple[tuple[int, Any], ...]
ZERO: Index = ()
ONE = "1"  # the atom of a constant term: (c, ONE) is the number c


def dim(k: int) -> Index:
    return ((1, k),)


def const(c: int) -> Index:
    return make([(c, ONE)])


def _key(term: tuple[int, Any]) -> str:
    return repr(term[1])


def make(terms: Sequence[tuple[int, Any]]) -> Index:
    """Canonical form: equal atoms merged, zero terms dropped, and the pair
    s*c*(E//s) + c*(E%s) folded back into c*E (a merge of dims that a split undid)."""
    acc: dict[str, list[Any]] = {}
    for coef, atom in terms:
        if coef == 0:
            continue
        k = repr(atom)
        if k in acc:
            acc[k][0] += coef
        else:
            acc[k] = [coef, atom]
    items = [(c, a) for c, a in acc.values() if c != 0]
    for ci, ai in items:
        if isinstance(ai, tuple) and ai[0] == "mod":
            quotient = _quotient_atom(ai[1], ai[2])
            for cj, aj in items:
                if aj == quotient and cj == ci * ai[2]:
                    rest = [(c, a) for c, a in items if a is not ai and a is not aj]
                    return make(rest + [(ci * c, a) for c, a in ai[1]])
    return tuple(sorted(items, key=_key))


def _quotient_atom(x: Index, m: int) -> Any:
    """The atom of x // m in canonical form (nested divisions flattened)."""
    if len(x) == 1 and x[0][0] == 1 and isinstance(x[0][1], tuple) and x[0][1][0] == "div":
        return ("div", x[0][1][1], x[0][1][2] * m)
    return ("div", x, m)


def add(*xs: Index) -> Index:
    return make([t for x in xs for t in x])


def scale(x: Index, c: int) -> Index:
    return make([(c * k, a) for k, a in x])


def atom_max(atom: Any, sizes: Sequence[int]) -> int:
    if atom == ONE:
        return 1
    if isinstance(atom, int):
        return sizes[atom] - 1
    if atom[0] == "div":
        return max_value(atom[1], sizes) // atom[2]
    return min(atom[2] - 1, max_value(atom[1], sizes))


def max_value(x: Index, sizes: Sequence[int]) -> int:
    """Largest value over the domain (all coefficients of our indices are >= 0)."""
    return sum(c * atom_max(a, sizes) for c, a in x if c > 0)


def _split(x: Index, q: int, sizes: Sequence[int]) -> tuple[Index, Index] | None:
    """x = q*big + small with 0 <= small < q, or None."""
    big = [(c // q, a) for c, a in x if c % q == 0]
    small = [(c, a) for c, a in x if c % q != 0]
    if any(c < 0 for c, _ in x) or max_value(make(small), sizes) >= q:
        return None
    return make(big), make(small)


def floordiv(x: Index, s: int, sizes: Sequence[int]) -> Index:
    if s == 1:
        return x
    if max_value(x, sizes) < s:
        return ZERO
    if all(c % s == 0 for c, _ in x):
        return make([(c // s, a) for c, a in x])
    exact = [(c // s, a) for c, a in x if c % s == 0]
    if exact:  # (s*A + B) // s == A + B // s for all integers
        return add(make(exact), floordiv(make([(c, a) for c, a in x if c % s != 0]), s, sizes))
    for q in sorted({abs(c) for c, _ in x}, reverse=True):
        if s % q == 0 and q > 1:
            parts = _split(x, q, sizes)
            if parts is not None:
                return floordiv(parts[0], s // q, sizes)
    return ((1, _quotient_atom(x, s)),)


def modulo(x: Index, m: int, sizes: Sequence[int]) -> Index:
    if max_value(x, sizes) < m:
        return x
    kept = [(c, a) for c, a in x if c % m != 0]
    if len(kept) < len(x):
        return modulo(make(kept), m, sizes)
    for q in sorted({abs(c) for c, _ in x}, reverse=True):
        if m % q == 0 and q > 1:
            parts = _split(x, q, sizes)
            if parts is not None:
                return add(scale(modulo(parts[0], m // q, sizes), q), parts[1])
    return ((1, ("mod", x, m)),)


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return strides[::-1]


def reshape(
    coords: Sequence[Index], src: Sequence[int], dst: Sequence[int], sizes: Sequence[int]
) -> list[Index]:
    """Coordinates in `dst` of the element at `coords` of a tensor of shape `src`, for a
    row-major reshape src -> dst (same number of elements)."""
    linear = add(*(scale(c, st) for c, st in zip(coords, contiguous_strides(src), strict=True)))
    return [
        modulo(floordiv(linear, st, sizes), n, sizes) if n != 1 else ZERO
        for st, n in zip(contiguous_strides(dst), dst, strict=True)
    ]


def dims_of(x: Index) -> set[int]:
    out: set[int] = set()
    for _, a in x:
        if isinstance(a, int):
            out.add(a)
        elif a != ONE:
            out |= dims_of(a[1])
    return out


def render(x: Index, names: Sequence[str]) -> str:
    """Triton source for x, with domain dim k spelled names[k]."""
    if not x:
        return "0"
    parts = []
    for c, a in x:
        if a == ONE:
            parts.append(str(c))
            continue
        if isinstance(a, int):
            atom = names[a]
        else:
            op = "//" if a[0] == "div" else "%"
            atom = f"(({render(a[1], names)}) {op} {a[2]})"
        parts.append(atom if c == 1 else f"{c} * {atom}")
    return " + ".join(parts)


def to_tuple(obj: Any) -> Any:
    """Lists (from JSON) back to the tuples an Index is made of."""
    if isinstance(obj, list):
        return tuple(to_tuple(o) for o in obj)
    return obj
