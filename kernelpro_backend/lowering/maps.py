"""Index maps: which element of each subgraph value a kernel computes at a domain point.

Owns: choosing how each output is laid over the domain (broadcast, reshape, or the kept dims
of a reduction) and propagating those maps from the outputs back to every node and input
(broadcasting, views, reductions, row gathers; cat and slice pieces through pieces.py). A value
reached twice with different maps is a `MapConflict`; a view of a computed value that is not a
reshape/permute/expand/slice/select is `Unsupported`: never guessed.
Must not: emit ops or render source.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch.fx as fx

from ..codegen import index as ix
from ..codegen.errors import MapConflict, Unsupported
from ..fx_passes.ops import PIECEWISE, Role, op_name, reduction_signature, role
from .pieces import piece_maps, slice_source_map
from .views import (
    PERMUTES,
    RESHAPES,
    Map,
    computes,
    forward_view_map,
    is_view_of_input,
    permutation,
    picked_slice,
    reshape_like,
    shape,
    split_chunk,
    view_chain,
)

# Reductions with two outputs, read through getitem: var_mean (var, mean), max/min over a dim
# (values, indices).
_TWO_OUTPUT_REDUCTIONS = ("aten::var_mean", "aten::max", "aten::min")
INDEX_FACTORIES = ("prims::iota", "aten::arange")
REDUCTIONS = {
    "aten::sum", "aten::mean", "aten::amax", "aten::amin", "aten::var_mean", "aten::var",
    "aten::std", "aten::argmax", "aten::argmin",
}  # fmt: skip


def broadcast(m: Map, out_shape: Sequence[int], in_shape: Sequence[int]) -> Map:
    off = len(out_shape) - len(in_shape)
    if off < 0:
        raise Unsupported(
            f"operand of shape {tuple(in_shape)} has more dims than {tuple(out_shape)}"
        )
    res: Map = []
    for i, s in enumerate(in_shape):
        if s == 1:
            res.append(ix.ZERO)
        elif s == out_shape[i + off]:
            res.append(m[i + off])
        else:
            raise Unsupported(f"shape {tuple(in_shape)} does not broadcast to {tuple(out_shape)}")
    return res


def reduction_parts(node: fx.Node) -> tuple[fx.Node, tuple[int, ...], bool]:
    """(reduced input, reduced dims, keepdim) of a reduction (or var_mean) node."""
    src = node.args[0]
    sig = reduction_signature(node)
    if not isinstance(src, fx.Node) or sig is None:
        raise Unsupported(f"cannot read the reduced dims of {node.format_node()}")
    keep = node.kwargs.get("keepdim", node.args[2] if len(node.args) > 2 else False)
    if op_name(node) in ("aten::var_mean", "aten::var", "aten::std"):
        keep = node.kwargs.get("keepdim", False)
    elif op_name(node) in ("aten::max", "aten::min") and len(node.args) < 2:
        raise Unsupported(f"{node.format_node()}: max/min over every element is not lowered")
    return src, sig[1], bool(keep)


class MapBuilder:
    """Top-down propagation of index maps over one subgraph."""

    def unit_dims_dropped(self, index: ix.Index) -> ix.Index:
        """`index` without its terms on domain dims of extent 1 (their coordinate is always 0),
        so two reads that differ only there are one map (instance norm reduces a size-1 dim)."""
        kept = tuple(t for t in index if not (isinstance(t[1], int) and self.domain[t[1]] == 1))
        return kept if len(kept) == len(index) else ix.make(kept)

    def __init__(
        self,
        nodes: Sequence[fx.Node],
        inputs: Sequence[fx.Node],
        domain: Sequence[int],
        reduced: Sequence[int],
    ) -> None:
        self.nodes = list(nodes)
        self.inputs = set(inputs)
        self.domain = tuple(domain)
        self.reduced = tuple(reduced)
        self.maps: dict[fx.Node, Map] = {}
        self.consumer: fx.Node | None = None  # the node propagating now
        # views of an iota/arange: (the factory, its map under the view), each read evaluated
        self.factory_reads: dict[fx.Node, tuple[fx.Node, Map]] = {}
        # outputs that pick one slice of a value (getitem of unbind, select): node ->
        # (source node, index of the picked coordinate, picked value); stored where it matches
        self.selections: dict[fx.Node, tuple[fx.Node, ix.Index, int]] = {}
        # outputs computed from such a slice through views and pointwise ops: their stores are
        # limited to the slice's domain points, (index of the picked coordinate, value)
        self.store_predicates: dict[fx.Node, tuple[ix.Index, int]] = {}

    def give(self, node: fx.Node, m: Map) -> None:
        m = [self.unit_dims_dropped(index) for index in m]
        old = self.maps.get(node)
        if old is None:
            self.maps[node] = list(m)
        elif old != list(m):
            raise MapConflict(
                f"{node.name} is read at two different index maps ({old} vs {list(m)}); "
                "no template recomputes a value at two layouts",
                node,
                self.consumer,
            )

    def seed_output(self, out: fx.Node) -> None:
        self.consumer = None
        so, dom = shape(out), self.domain
        ident = [ix.dim(k) for k in range(len(dom))]
        picked = picked_slice(out)
        if picked is not None and math.prod(shape(picked[0])) == math.prod(dom):
            src, d, i = picked
            src_map = ix.reshape(ident, dom, shape(src), dom)
            self.give(src, src_map)
            self.give(out, src_map[:d] + src_map[d + 1 :])
            self.selections[out] = (src, src_map[d], i)
            return
        if self._seed_picked_through_views(out) or self._seed_permuted_view_of_known(out):
            return
        kept = [k for k in range(len(dom)) if k not in self.reduced]
        if self.reduced and [s for s in so if s != 1] == [dom[k] for k in kept if dom[k] != 1]:
            # a per-row result ([C] from batch-norm statistics): laid over the kept dims
            coords = [ix.dim(k) for k in kept]
            self.give(out, ix.reshape(coords, [dom[k] for k in kept], so, dom))
            return
        try:
            self.give(out, broadcast(ident, dom, so))
            return
        except Unsupported:
            pass
        if math.prod(so) == math.prod(dom):
            self.give(out, ix.reshape(ident, dom, so, dom))
            return
        if math.prod(so) == math.prod(dom[k] for k in kept):
            coords = [ix.dim(k) for k in kept]
            self.give(out, ix.reshape(coords, [dom[k] for k in kept], so, dom))
            return
        if math.prod(so) > math.prod(dom):
            raise Unsupported(
                f"output {out.name} of shape {so} is larger than the domain {dom}: the kernel "
                "would broadcast its result to a larger tensor, which no template does"
            )
        msg = f"output {out.name} of shape {so} does not map onto the domain {dom}"
        raise MapConflict(msg, out, out)  # cut off with what it needs, it may lower alone

    def _seed_picked_through_views(self, out: fx.Node) -> bool:
        """An output that is one slice of a value covering the domain (a chunk of a split, or a
        selected index), seen through reshapes and permutes: the head split of a QKV
        projection, q/k/v = split(addmm(...)).view(B, S, H, D).transpose(1, 2).contiguous().
        The slice's map comes from the source's (known, or the source laid over the domain),
        the output's from pushing it through the views; stores only the slice's points."""
        dom = self.domain
        top, chain = view_chain(out, self.inputs)
        if self.reduced or (not chain and split_chunk(out) is None):
            return False  # a bare picked slice is seed_output's own case
        ident = [ix.dim(k) for k in range(len(dom))]
        chunk, picked = split_chunk(top), picked_slice(top)
        if chunk is not None:
            src, d, j, size = chunk
            src_shape = shape(src)
            virtual = (*src_shape[:d], src_shape[d] // size, size, *src_shape[d + 1 :])
        elif picked is not None:
            src, d, j = picked
            src_shape = shape(src)
            virtual = (*src_shape[:d], src_shape[d], *src_shape[d + 1 :])
        else:
            return False
        if math.prod(src_shape) != math.prod(dom):
            return False
        known = self._known_map(src)
        if known is None:  # the source laid over the domain
            vmap = ix.reshape(ident, dom, virtual, dom)
            known = ix.reshape(ident, dom, src_shape, dom)
        elif chunk is not None:  # the chunked dim split into (chunk, position in it)
            at = known[d]
            vmap = [
                *known[:d],
                ix.floordiv(at, size, dom),
                ix.modulo(at, size, dom),
                *known[d + 1 :],
            ]
        else:
            vmap = list(known)
        m = vmap[:d] + vmap[d + 1 :]
        self.give(src, known)
        self.give(top, m)
        self.selections[top] = (src, vmap[d], j)
        for node in chain:
            m = forward_view_map(node, m, dom)
            self.give(node, m)
        self.store_predicates[out] = (vmap[d], j)
        return True

    def _known_map(self, node: fx.Node) -> Map | None:
        """`node`'s map if it has one, or the map of a value that has one (the GEMM's
        accumulator) pushed down the views to `node` (a head split's heads permuted before the
        pick: q, k, v = qkv.view(B, N, 3, H, D).permute(2, 0, 3, 1, 4)); None otherwise."""
        if node in self.maps:
            return self.maps[node]
        top, chain = view_chain(node, self.inputs)
        if not chain or top not in self.maps:
            return None
        self._push(top, chain)
        return self.maps[node]

    def _seed_permuted_view_of_known(self, out: fx.Node) -> bool:
        """An output that is a value with a map already given (a GEMM's accumulator tile) seen
        through reshapes and permutes, e.g. attention's heads put back side by side,
        bmm(p, v).view(B, H, T, D).transpose(1, 2).contiguous().view(B, T, H * D): the known
        map pushed through the views, so the store writes that layout directly. Chains without
        a permute are plain reshapes, which the generic cases below map."""
        top, chain = view_chain(out, self.inputs)
        if self.reduced or top not in self.maps or not any(op_name(n) in PERMUTES for n in chain):
            return False
        self._push(top, chain)
        return True

    def run(self, outputs: Sequence[fx.Node], anchor: fx.Node | None = None) -> dict[fx.Node, Map]:
        """Seed the outputs' maps and propagate them to every node and input. An output that
        is a permuted copy of a value no other output maps yet (the transposed copy of a norm's
        output that nn.MultiheadAttention makes) waits for that value's map from the others,
        then is stored through its views; laid over the domain itself it would be read at
        two maps."""
        chains = {o: view_chain(o, self.inputs) for o in outputs}
        deferred = {o: c for o, c in chains.items() if self._permuted_copy(*c)}
        for o in outputs:
            if o not in deferred:
                self.seed_output(o)
        done: set[fx.Node] = set()
        self._propagate_all(anchor, done)
        for o, (top, chain) in deferred.items():
            if top in self.maps:
                self._push(top, chain)
            elif not self._seed_before_permute(chain):
                self.seed_output(o)
            self._propagate_all(anchor, done)
        return self.maps

    def _seed_before_permute(self, chain: Sequence[fx.Node]) -> bool:
        """A permuted copy whose value no other output maps (an MLP-Mixer's residual sum
        leaving only transposed): the value before the chain's first permute laid over the
        domain, then pushed down (the copy itself laid there read the row sums per column);
        where an earlier output's chain laid that value already, pushed down from there."""
        first = next(i for i, n in enumerate(chain) if op_name(n) in PERMUTES)
        if first == 0:
            return False
        pre = chain[first - 1]
        if pre in self.maps:  # laid by an earlier output's chain (a soft Dice's two gradients
            self._push(pre, chain[first:])  # of one permuted input): the same layout
            return True
        if math.prod(shape(pre)) != math.prod(self.domain):
            return False
        ident = [ix.dim(k) for k in range(len(self.domain))]
        self.give(pre, ix.reshape(ident, self.domain, shape(pre), self.domain))
        self._push(pre, chain[first:])
        return True

    def _permuted_copy(self, top: fx.Node, chain: Sequence[fx.Node]) -> bool:
        """Whether `chain` (from `top`, a value over the whole domain) permutes it (seed_output
        would lay the copy over the domain itself: a pixel shuffle's backward beside its other
        outputs too) and carries a value the group computes (views of an input alone, as Swin's
        window partition of a gradient, are laid over the domain: inputs are read at any map)."""
        return (
            any(op_name(n) in PERMUTES for n in chain)
            and math.prod(shape(top)) == math.prod(self.domain)
            and (top not in self.inputs or any(computes(n) for n in chain))
        )

    def _push(self, top: fx.Node, chain: Sequence[fx.Node]) -> None:
        """`top`'s map pushed down a chain of views to the output at its end."""
        m = self.maps[top]
        for node in chain:
            m = forward_view_map(node, m, self.domain)
            self.give(node, m)

    def _propagate_all(self, anchor: fx.Node | None, done: set[fx.Node]) -> None:
        """Propagate every mapped node not propagated yet, outputs first (reverse order)."""
        for n in reversed(self.nodes):
            m = self.maps.get(n)
            if m is None or n in done or n is anchor or n in self.selections:
                continue
            done.add(n)
            if not is_view_of_input(n, self.inputs):
                self._propagate(n, m)

    def _propagate(self, n: fx.Node, m: Map) -> None:
        r, name = role(n), op_name(n)
        self.consumer = n  # the reader a second map comes from (MapConflict)
        if name in PIECEWISE:  # a cat, a slice_scatter: each piece at its own map
            for a, piece_map in piece_maps(n, m, self.domain):
                self.give(a, piece_map)
        elif r is Role.GETITEM:
            src = n.args[0]
            if not isinstance(src, fx.Node) or op_name(src) not in _TWO_OUTPUT_REDUCTIONS:
                raise Unsupported(
                    f"{n.format_node()}: only the outputs of var_mean and max/min over a dim "
                    "are supported"
                )
            self._reduce(src, m)
        elif r is Role.REDUCTION:
            if name not in REDUCTIONS:
                raise Unsupported(f"no template lowers the reduction {name}")
            self._reduce(n, m)
        elif r is Role.POINTWISE:
            out = shape(n)
            for a in n.all_input_nodes:
                self.give(a, broadcast(m, out, shape(a)))
        elif r is Role.VIEW:
            src = n.all_input_nodes[0]
            if op_name(src) in INDEX_FACTORIES:  # computed where read: any map (a one-hot's
                self.factory_reads[n] = (src, self._view_source_map(n, src, m))  # two iotas)
                return
            self.give(src, self._view_source_map(n, src, m))
        elif r is Role.ROW_GATHER:
            self._row_gather(n, m)
        elif r is Role.FACTORY:
            return
        else:
            raise Unsupported(f"no template lowers {name or n.target} ({r.value})")

    def _view_source_map(self, n: fx.Node, src: fx.Node, m: Map) -> Map:
        name, out, inp = op_name(n), shape(n), shape(src)
        if name in RESHAPES or (name == "aten::expand" and out == inp):
            return ix.reshape(m, out, inp, self.domain)
        if name in PERMUTES:
            perm = permutation(n, len(inp))
            res: Map = [ix.ZERO] * len(inp)
            for i, p in enumerate(perm):
                res[p] = m[i]
            return res
        if name == "aten::expand":
            return broadcast(m, out, inp)
        if name == "aten::as_strided" and reshape_like(n, src, out):
            return ix.reshape(m, out, inp, self.domain)
        if name == "aten::slice":
            return slice_source_map(n, m)
        picked = picked_slice(n) if name == "aten::select" else None
        if picked is not None:  # the source at the selected index along its dim
            _, d, i = picked
            return [*m[:d], ix.const(i), *m[d:]]
        raise Unsupported(
            f"view {name} of a computed value is not supported "
            "(only reshape/permute/expand/slice/select)"
        )

    def _reduce(self, n: fx.Node, m: Map) -> None:
        src, rdims, keep = reduction_parts(n)
        xs = shape(src)
        if [xs[d] for d in rdims] != [self.domain[d] for d in self.reduced]:
            raise Unsupported(
                f"{n.name} reduces dims {rdims} of {xs}, not the kernel's reduced dims "
                f"{self.reduced} of {self.domain} (a second-level reduction needs its own kernel)"
            )
        if any(set(self.reduced) & ix.dims_of(e) for e in m):  # a kernel of its own
            raise MapConflict(f"the result of {n.name} is read per column, not per row", n, n)
        res: Map = []
        kept = iter(m if not keep else [])
        for d in range(len(xs)):
            if d in rdims:
                res.append(ix.dim(self.reduced[rdims.index(d)]))
            else:
                res.append(m[d] if keep else next(kept))
        self.give(src, res)

    def _row_gather(self, n: fx.Node, m: Map) -> None:
        """gather(src, -1, index): src is read along the kernel's one reduced dim (the row), the
        index at the gather's own (per-row) position."""
        src, index = n.args[0], n.args[2]
        if not isinstance(src, fx.Node) or not isinstance(index, fx.Node):
            raise Unsupported(f"{n.format_node()}: gather operands must be tensors")
        xs = shape(src)
        if len(self.reduced) != 1 or xs[-1] != self.domain[self.reduced[0]]:
            raise Unsupported(
                f"{n.name} gathers along a row of {xs[-1]}, not the kernel's reduced dims "
                f"{self.reduced} of {self.domain}"
            )
        if any(set(self.reduced) & ix.dims_of(e) for e in m):
            raise Unsupported(f"the result of {n.name} is read per column, not per row")
        self.give(src, [*m[:-1], ix.dim(self.reduced[0])])
        self.give(index, m)
