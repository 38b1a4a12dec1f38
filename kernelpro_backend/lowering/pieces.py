"""Ops that are pointwise by pieces in a kernel: cat and slice_scatter (RoPE's rotate_half,
torch.cat((-x2, x1), -1), and its backward), and slices of computed values (x[..., d // 2:]).

Owns: the pieces of a cat / slice_scatter (which input holds which range of the output along
one dim); each piece's index map: the output's coordinate c along that dim shifted into the
piece and wrapped into its extent, (c - lo) mod length, so that a point outside the piece still
reads inside the piece's input (that value is dropped, never stored); a slice's source map
(index + start); loads of a piece read only in its range (`piece_load`: the other pieces'
points skip its memory); the ops picking each point's piece (one `index` of c, compared with
the pieces' bounds, then `where`: exact for NaN and inf, where a sum of zeroed loads is not);
and `unshared`: a private copy of a subgraph where each shifted piece reads its own copy of the
pointwise ops and views it is computed from (a value read by two pieces, or by a piece and the
rest, is read at two maps; the copies are recomputed, never stored).
Must not: choose domains or templates, render source, or change the caller's graph (copies
live in a private graph). A piece computed by anything but pointwise ops, views and constants
(a reduction) is a `MapConflict` cutting the subgraph there; a strided slice is `Unsupported`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

import torch
import torch.fx as fx

from ..codegen import index as ix
from ..codegen.errors import MapConflict, Unsupported
from ..codegen.program_walk import PIECE_LOAD
from ..fx_passes import Subgraph
from ..fx_passes.ops import PIECEWISE, Role, op_name, role
from .views import Map, shape

Ref = tuple[str, Any]


class _Program(Protocol):
    """What piece_value needs of program.py's ProgramBuilder (which imports this module)."""

    maps: dict[fx.Node, Map]

    def ref(self, arg: Any) -> Ref: ...

    def emit(self, op: str, args: Sequence[Ref], dtype: str) -> Ref: ...


# A copy per shifted piece multiplies the nodes a kernel computes (nested cats multiply it
# again); past this many nodes the subgraph is left to the fallback.
MAX_NODES = 2000
_RECOMPUTED = (Role.POINTWISE, Role.VIEW, Role.FACTORY)
# meta key of a node copied for a piece: ((the piecewise node, dim, lo, hi), ...) where it is
# taken, the pieces it lies in (nested cats) outermost first
PIECE = "kernelpro_piece"


class Piece(NamedTuple):
    value: fx.Node  # the input holding the piece
    arg: tuple[int, int | None]  # where the op reads it: (argument, index in a list or None)
    lo: int  # the piece is taken where lo <= c < hi, over the pieces before it
    hi: int
    length: int  # its extent along the dim: c reads the piece's element c - lo


def _arg(node: fx.Node, i: int, name: str, default: Any) -> Any:
    return node.args[i] if len(node.args) > i else node.kwargs.get(name, default)


def _bound(value: Any, size: int, default: int) -> int:
    """A slice bound as PyTorch reads it: None is the default, negative counts from the end,
    the result clamped to [0, size]."""
    if value is None:
        return default
    if not isinstance(value, int):
        raise Unsupported(f"a slice bound {value!r} is not a static integer")
    return min(max(value + size if value < 0 else value, 0), size)


def slice_parts(node: fx.Node) -> tuple[int, int, int]:
    """(dim, start, end) of a slice or slice_scatter with step 1, made non-negative."""
    src = node.args[0]
    assert isinstance(src, fx.Node)
    first = 1 if op_name(node) == "aten::slice" else 2  # slice_scatter(self, src, dim, ...)
    rank = len(shape(src))
    d = int(_arg(node, first, "dim", 0)) % rank
    size = shape(src)[d]
    step = _arg(node, first + 3, "step", 1)
    if step != 1:
        raise Unsupported(f"{node.name}: a slice with step {step} is not lowered (step 1 only)")
    start = _bound(_arg(node, first + 1, "start", None), size, 0)
    end = _bound(_arg(node, first + 2, "end", None), size, size)
    return d, start, max(start, end)


def pieces(node: fx.Node) -> tuple[int, list[Piece]]:
    """(dim, pieces) of a cat or slice_scatter, each later piece taken over those before it:
    a cat's inputs side by side (empty ones skipped, as torch.cat skips them), a
    slice_scatter's base everywhere and then its src over [start, end)."""
    out = shape(node)
    if op_name(node) == "aten::slice_scatter":
        base, src = node.args[:2]
        d, start, end = slice_parts(node)
        assert isinstance(base, fx.Node) and isinstance(src, fx.Node)
        found = [Piece(base, (0, None), 0, out[d], out[d])]
        if end > start:
            found.append(Piece(src, (1, None), start, end, end - start))
        return d, found
    tensors = node.args[0]
    if op_name(node) != "aten::cat" or not isinstance(tensors, (list, tuple)):
        raise Unsupported(f"{node.format_node()} is not a cat or slice_scatter")
    d = int(_arg(node, 1, "dim", 0)) % max(len(out), 1)
    found, lo = [], 0
    for j, t in enumerate(tensors):
        if not isinstance(t, fx.Node):
            raise Unsupported(f"{node.name}: cat of {t!r}, not a tensor")
        length = 0 if shape(t) == (0,) else shape(t)[d]  # a 1-D empty tensor is skipped
        if length:
            found.append(Piece(t, (0, j), lo, out[d], length))
        lo += length
    if not found:
        raise Unsupported(f"{node.name}: a cat of empty tensors")
    return d, found


def _whole(p: Piece, extent: int) -> bool:
    return p.lo == 0 and p.length == extent


def piece_maps(node: fx.Node, m: Map, domain: tuple[int, ...]) -> list[tuple[fx.Node, Map]]:
    """Each piece's input with its map, from the op's map `m`: the coordinate along the dim
    shifted into the piece, wrapped into its extent ((c - lo) mod length, always in bounds)."""
    d, found = pieces(node)
    extent = shape(node)[d]
    res = []
    for p in found:
        if _whole(p, extent):
            res.append((p.value, list(m)))
            continue
        wrapped = ix.modulo(ix.add(m[d], ix.const(-p.lo % p.length)), p.length, domain)
        res.append((p.value, [*m[:d], wrapped, *m[d + 1 :]]))
    return res


def slice_source_map(node: fx.Node, m: Map) -> Map:
    """The map of a slice's source, from the slice's: index + start along the sliced dim."""
    d, start, _ = slice_parts(node)
    return [*m[:d], ix.add(m[d], ix.const(start)), *m[d + 1 :]]


def piece_value(prog: _Program, node: fx.Node) -> Ref:
    """The op's value at each point: the first piece, then each later piece where its range
    holds the point's coordinate (its value elsewhere, read at a wrapped index, is dropped)."""
    d, found = pieces(node)
    extent = shape(node)[d]
    dt = str(node.meta["val"].dtype).removeprefix("torch.")
    coord: Ref | None = None
    acc: Ref | None = None
    for p in found:
        v = prog.ref(p.value)
        if str(p.value.meta["val"].dtype).removeprefix("torch.") != dt:  # cat promotes
            v = prog.emit("cast", (v, ("c", dt)), dt)
        if acc is None or _whole(p, extent):
            acc = v
            continue
        coord = coord or prog.emit("index", (("c", prog.maps[node][d]),), "int64")
        conds = [prog.emit("ge", (coord, ("c", p.lo)), "bool")] if p.lo > 0 else []
        if p.hi < extent:
            conds.append(prog.emit("lt", (coord, ("c", p.hi)), "bool"))
        cond = conds[0] if len(conds) == 1 else prog.emit("logical_and", tuple(conds), "bool")
        acc = prog.emit("where", (cond, v, acc), dt)
    assert acc is not None
    return acc


def piece_load(prog: _Program, node: fx.Node, load: Ref) -> Ref:
    """`load` (of `node`, a view of an input) read only in the ranges of the pieces `node` was
    copied for, where it is: the other pieces' points skip its memory."""
    within = node.meta.get(PIECE)
    if not within:
        return load
    # (a range whose reader has no map - none computes it - holds everywhere: dropped)
    ranges = tuple((prog.maps[r][d], lo, hi) for r, d, lo, hi in within if r in prog.maps)
    if not ranges:
        return load
    dt = str(node.meta["val"].dtype).removeprefix("torch.")
    return prog.emit(PIECE_LOAD, (load, ("c", ranges)), dt)


def unshared(sg: Subgraph) -> Subgraph:
    """`sg` in a private graph where each shifted piece of a cat / slice_scatter reads its own
    copy of the nodes it is computed from (reads of an input through an alias of it: a load of
    its own), so every node keeps one index map; `sg` itself when it has no piecewise op."""
    if not any(op_name(n) in PIECEWISE for n in sg.nodes):
        return sg
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for inp in sg.inputs:
        env[inp] = graph.placeholder(inp.name)
        env[inp].meta = dict(inp.meta)
    for n in sg.nodes:
        env[n] = graph.node_copy(n, env.__getitem__)
    graph.output(tuple(env[o] for o in sg.outputs))
    origin = {c: n for n, c in env.items()}
    inputs = {env[inp] for inp in sg.inputs}
    work = [env[n] for n in reversed(sg.nodes) if op_name(n) in PIECEWISE]
    while work:
        node = work.pop(0)
        if not node.users:
            continue  # read only by nodes a copy replaced
        d, found = pieces(node)
        for p in found:
            if not _whole(p, shape(node)[d]):
                copy = _ConeCopy(graph, inputs, origin, (node, d, p.lo, p.lo + p.length))
                _replace_arg(node, p.arg, copy.of(p.value))
                # consumers first (made lists producers first), as the originals above: a
                # piece's copies then read their reader, never one copied after them
                work += [c for c in reversed(copy.made) if op_name(c) in PIECEWISE]
        graph.eliminate_dead_code()
        if len(graph.nodes) > MAX_NODES:
            raise Unsupported(f"the pieces of its cats need over {MAX_NODES} recomputed nodes")
    nodes = [n for n in graph.nodes if n.op == "call_function"]
    inputs_in_order = [env[inp] for inp in sg.inputs]
    outputs = [env[o] for o in sg.outputs]
    return dataclasses.replace(sg, nodes=nodes, inputs=inputs_in_order, outputs=outputs)


def _replace_arg(node: fx.Node, at: tuple[int, int | None], new: fx.Node) -> None:
    args = list(node.args)
    if at[1] is None:
        args[at[0]] = new
    else:
        items = list(args[at[0]])  # type: ignore[arg-type]
        items[at[1]] = new
        args[at[0]] = items
    node.args = tuple(args)


class _ConeCopy:
    """Copies of the nodes a piece is computed from, inserted before its reader (`piece`: the
    reader, dim, lo, hi, kept in each copy's meta); inputs are read through a fresh alias each
    (a view of the input: loaded at its own map)."""

    def __init__(
        self,
        graph: fx.Graph,
        inputs: set[fx.Node],
        origin: dict[fx.Node, fx.Node],
        piece: tuple[fx.Node, int, int, int],
    ) -> None:
        self.graph, self.inputs, self.origin = graph, inputs, origin
        self.reader, self.piece = piece[0], piece
        self.memo: dict[fx.Node, fx.Node] = {}
        self.made: list[fx.Node] = []

    def of(self, n: fx.Node) -> fx.Node:
        if n in self.memo:
            return self.memo[n]
        if n not in self.inputs and role(n) not in _RECOMPUTED:
            cut = self.origin.get(n, n)
            raise MapConflict(
                f"{cut.name} ({op_name(n) or n.target}) is read by a piece of "
                f"{self.origin.get(self.reader, self.reader).name} at a shifted index: only "
                "pointwise ops, views and constants are recomputed there",
                cut,
                cut,
            )
        with self.graph.inserting_before(self.reader):
            if n in self.inputs:
                c = self.graph.call_function(torch.ops.aten.alias.default, (n,))
                c.meta = dict(n.meta)
            else:
                c = self.graph.node_copy(n, self.of)
        c.meta[PIECE] = (*n.meta.get(PIECE, ()), self.piece)
        self.origin[c] = self.origin.get(n, n)
        self.memo[n] = c
        self.made.append(c)
        return c
