"""Views in a subgraph as the index maps see them: the shape of a node's value, which ops are
reshapes and permutes, slices picked from a computed value (unbind/select, equal split chunks),
the chain of views (and same-shape ops) from a value to an output (and whether a node of it
computes), a map pushed forward through one view, whether an as_strided is a reshape, and
whether a node is a chain of views of a subgraph input (loaded straight from its memory) and
that input.

Owns: those readers. Must not: give maps to nodes (maps.py does) or emit anything.
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Sequence
from typing import Any

import torch
import torch.fx as fx

from ..codegen import index as ix
from ..codegen.errors import Unsupported
from ..fx_passes.ops import PIECEWISE, Role, op_name, role

Map = list[ix.Index]
RESHAPES = {
    "aten::view",
    "aten::reshape",
    "aten::_unsafe_view",
    "aten::unsqueeze",
    "aten::squeeze",
    "aten::alias",
    "aten::clone",
    "aten::flatten",
}
PERMUTES = {"aten::permute", "aten::transpose", "aten::t"}


def computes(n: fx.Node) -> bool:
    """Whether a node of a view chain computes values (a same-shape pointwise op), rather than
    viewing, copying or expanding them."""
    return op_name(n) not in RESHAPES | PERMUTES | {"aten::expand"}


def shape(node: fx.Node) -> tuple[int, ...]:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        raise Unsupported(f"{node.format_node()} has no single tensor value")
    return tuple(int(s) for s in val.shape)


def picked_slice(node: fx.Node) -> tuple[fx.Node, int, int] | None:
    """(source, dim, index) when `node` is getitem(unbind(source, dim), index) or
    select(source, dim, index) of a computed value."""
    name = op_name(node)
    if node.target is operator.getitem and isinstance(node.args[0], fx.Node):
        parent = node.args[0]
        if op_name(parent) == "aten::unbind" and isinstance(parent.args[0], fx.Node):
            src = parent.args[0]
            d = int(parent.args[1]) if len(parent.args) > 1 else 0  # type: ignore[arg-type]
            return src, d % len(shape(src)), int(node.args[1])  # type: ignore[arg-type]
    if name == "aten::select" and isinstance(node.args[0], fx.Node):
        src = node.args[0]
        d = int(node.args[1]) % len(shape(src))  # type: ignore[arg-type]
        return src, d, int(node.args[2]) % shape(src)[d]  # type: ignore[arg-type]
    return None


def split_chunk(node: fx.Node) -> tuple[fx.Node, int, int, int] | None:
    """(source, dim, chunk, chunk size) when `node` is getitem(split(source, size, dim), chunk)
    (or split_with_sizes) of a computed value whose chunks along `dim` are all `size` long."""
    if node.target is not operator.getitem or not isinstance(node.args[0], fx.Node):
        return None
    parent = node.args[0]
    if op_name(parent) not in ("aten::split", "aten::split_with_sizes"):
        return None
    src, sizes, *rest = parent.args
    if not isinstance(src, fx.Node):
        return None
    dim: Any = rest[0] if rest else parent.kwargs.get("dim", 0)
    d = int(dim) % len(shape(src))
    chunks = set(sizes) if isinstance(sizes, (list, tuple)) else {sizes}
    size = next(iter(chunks))
    if len(chunks) != 1 or not isinstance(size, int) or size <= 0 or shape(src)[d] % size:
        return None
    return src, d, int(node.args[1]), size  # type: ignore[arg-type]


def view_chain(out: fx.Node, stop: Collection[fx.Node] = ()) -> tuple[fx.Node, list[fx.Node]]:
    """The first node up the chain of reshapes/permutes (clone included), same-shape
    pointwise ops (followed through their first input) and expands to the same shape (what
    matmul's decomposition puts before a bmm operand's copy) that ends at `out`, and the
    chain's nodes from it down to `out` (in order). The walk ends at a node of `stop` (a
    subgraph's inputs: what computes them lies outside it)."""
    chain: list[fx.Node] = []
    node = out
    while node.all_input_nodes and node not in stop:
        first = node.all_input_nodes[0]
        view = op_name(node) in RESHAPES or op_name(node) in PERMUTES
        # a same-shape pointwise op, or an expand to the shape it has
        # (not a cat or slice_scatter: which input an element comes from depends on where it is)
        pointwise = role(node) is Role.POINTWISE and op_name(node) not in PIECEWISE
        same = pointwise or op_name(node) == "aten::expand"
        if not view and not (same and shape(first) == shape(node)):
            break
        chain.append(node)
        node = first
    return node, chain[::-1]


def forward_view_map(view: fx.Node, m: Map, domain: Sequence[int]) -> Map:
    """The map of `view` from the map `m` of its input (a reshape or a permute)."""
    src = view.all_input_nodes[0]
    name, out, inp = op_name(view), shape(view), shape(src)
    if name in RESHAPES:
        return ix.reshape(m, inp, out, domain)
    if name not in PERMUTES:  # a same-shape pointwise op or expand
        return list(m)
    return [m[p] for p in permutation(view, len(inp))]


def reshape_like(n: fx.Node, src: fx.Node, out: Sequence[int]) -> bool:
    """Whether `as_strided(src, size, stride[, 0])` is a reshape: `src` is contiguous, the view
    keeps every element, row-major strides, no offset (group norm's decomposition views its
    [1, C/G, G, 1]-shaped scale so)."""
    val = src.meta.get("val")
    if not isinstance(val, torch.Tensor) or not val.is_contiguous():
        return False
    stride = list(n.args[2]) if len(n.args) > 2 else None  # type: ignore[arg-type]
    offset = n.args[3] if len(n.args) > 3 else n.kwargs.get("storage_offset")
    expected, acc = [], 1
    for size in reversed(out):
        expected.append(acc)
        acc *= size
    return offset in (None, 0) and stride == expected[::-1] and acc == val.numel()


def permutation(n: fx.Node, rank: int) -> list[int]:
    """Output dim i of a permute/transpose/t node reads input dim perm[i]."""
    perm = list(range(rank))
    if op_name(n) == "aten::permute":
        perm = [int(p) % rank for p in n.args[1]]  # type: ignore[union-attr,arg-type]
    elif rank == 2:
        perm = [1, 0]
    else:
        a, b = (int(x) % rank for x in n.args[1:3])  # type: ignore[call-overload,arg-type]
        perm[a], perm[b] = perm[b], perm[a]
    return perm


def is_view_of_input(node: fx.Node, inputs: set[fx.Node]) -> bool:
    """A chain of views rooted at a subgraph input: loaded straight from the input's memory
    with the strides its FakeTensor records."""
    if node in inputs:
        return True
    if role(node) is not Role.VIEW or not node.all_input_nodes:
        return False
    return is_view_of_input(node.all_input_nodes[0], inputs)


def root_input(node: fx.Node, inputs: set[fx.Node]) -> fx.Node:
    while node not in inputs:
        node = node.all_input_nodes[0]
    return node
