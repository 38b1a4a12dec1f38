"""The partitioner's one-domain rules: which node may not join which group, because the
lowering would then refuse the group whole (partition.py applies them while it groups).

Owns: `ANCHORS` and `DomainRules`, the mixin the partitioner inherits: `_within_domain` (no
pointwise output larger than the group's domain, and `_pieces_fit`: no cat piece the lowering
cannot recompute at a shifted index), `_scalar_bridge` (no two sizes tied by a
scalar alone), `_reindexes` (no GEMM epilogue at another index map than the GEMM's, and no
smaller value through such a view in any group) and `_is_view`.
Must not: merge or place nodes (partition.py does).
"""

from __future__ import annotations

import torch.fx as fx

from .group import Group
from .ops import COPIES, PIECEWISE, REINDEXING_VIEWS, Role, numel, op_name, reduced_numel

ANCHORS = (Role.GEMM, Role.CONV)


class DomainRules:
    """Read a partitioner's `roles` (node -> Role) and `group_of` (node -> its group)."""

    roles: dict[fx.Node, Role]
    group_of: dict[fx.Node, Group]

    def _within_domain(self, members: list[fx.Node], read: bool = False) -> bool:
        """Whether no pointwise output of `members` is larger than the group's domain: its
        anchor's output or, with `read` and no anchor, what its reductions read. The kernel would
        broadcast its result to a larger tensor, which no template does, and the lowering
        refuses the group whole (a classifier's GEMM and the average pool's backward; GroupNorm's
        per-group sums and dx). `read` holds where a pointwise op joins its producer's group and
        where a tail sinks; a merge pulling producer chains in may hold a small reduction beside
        a larger chain (a loss's count beside its gradient) until the sinks take them apart."""
        anchor = next((n for n in members if self.roles[n] in ANCHORS), None)
        sizes = [reduced_numel(n) or 0 for n in members if self.roles[n] is Role.REDUCTION]
        domain = numel(anchor) if anchor or not read else max(sizes, default=0) or None
        if not self._pieces_fit(members):
            return False
        if domain is None:
            return True
        return all((numel(n) or 0) <= domain for n in members if self.roles[n] is Role.POINTWISE)

    def _pieces_fit(self, members: list[fx.Node]) -> bool:
        """Whether each cat / slice_scatter among `members` can compute its pieces at shifted
        indices (lowering/pieces.py recomputes them there): no pointwise member read outside
        the group is smaller than the cat (an output off the cat's domain: an LSTM's gate
        gradients, cat for the weight gradient and one also read at its own size), and no piece
        computed in the group is computed from a reduction of it (a reduction is not
        recomputed at another row: DiT's adaLN backward)."""
        inside = set(members)
        pieces = [n for n in members if op_name(n) in PIECEWISE]
        if not pieces:
            return True
        size = max(numel(n) or 0 for n in pieces)
        for n in members:
            read_outside = any(u not in inside for u in n.users)
            if self.roles[n] is Role.POINTWISE and read_outside and (numel(n) or 0) < size:
                return False
        stack = [a for n in pieces for a in n.all_input_nodes if a in inside]
        seen: set[fx.Node] = set()
        while stack:
            a = stack.pop()
            if a in seen:
                continue
            seen.add(a)
            if self.roles[a] not in (Role.POINTWISE, Role.VIEW, Role.FACTORY):
                return False
            stack += [b for b in a.all_input_nodes if b in inside]
        return True

    def _scalar_bridge(self, head: Group, node: fx.Node) -> bool:
        """Whether `node` reaches group `head` (not anchored) only through scalars while both
        hold tensors of other sizes: a scalar (a loss's gradient) scales tensors of every shape
        in a backward graph, and joining them all would give one group two domains that no
        template lowers (GPT's last LayerNorm backward took in the LM head's weight gradient
        [V, d] times that scalar, beside its activations [T, d])."""
        if head.anchor is not None or self.roles[node] is not Role.POINTWISE:
            return False
        links = [a for a in node.all_input_nodes if self.group_of.get(a) is head]
        if not links or any((numel(a) or 2) > 1 for a in links):
            return False
        size = numel(node) or 0
        return size > 1 and any(
            (numel(n) or 0) > 1 and (numel(n) or 0) != size
            for n in head.nodes
            if self.roles[n] is Role.POINTWISE
        )

    def _reindexes(self, head: Group, node: fx.Node) -> bool:
        """Whether `node` (pointwise or a reduction) computes on group `head`'s values through
        a view that moves elements (a select, split piece, permute), where the group cannot
        hold it: in a GEMM's group always (no epilogue lowers at another index map than the
        GEMM's: RoPE on q and k, a residual added after a transpose); in a group without an
        anchor when `node` is smaller than the group's pointwise values (RoPE's backward
        negates half of a head's gradient: a half-size output no domain maps). A copy is a
        store elsewhere, which the template makes (the QKV head split): copies still join, but
        a reduction over one reduces the copied layout."""
        if op_name(node) in COPIES or head.anchor is Role.CONV:
            return False
        if head.anchor is None:
            sizes = [numel(n) or 0 for n in head.nodes if self.roles[n] is Role.POINTWISE]
            if (numel(node) or 0) >= max(sizes, default=0):
                return False  # a piece smaller than the group's values only
        # CLIP's loss: cross-entropy over logits.t(), copied
        through = COPIES if self.roles[node] is Role.REDUCTION else set()
        for a in node.all_input_nodes:
            while (
                self.group_of.get(a) is head
                and a.all_input_nodes
                and (self._is_view(a) or op_name(a) in through)
            ):
                if self.roles[a] is Role.GETITEM or op_name(a) in REINDEXING_VIEWS:
                    return True  # a split's piece, a select, a permute, ...
                a = a.all_input_nodes[0]
        return False

    def _is_view(self, node: fx.Node) -> bool:
        """A view, or one output of a view that splits (split's getitems)."""
        if self.roles[node] is Role.GETITEM:
            src = node.args[0]
            return isinstance(src, fx.Node) and self.roles[src] is Role.VIEW
        return self.roles[node] is Role.VIEW
