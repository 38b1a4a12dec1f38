"""Partitioning an aten graph into fusable, acyclic groups of nodes.

Owns: the grouping rules -
  (a) a GEMM/convolution anchor with the pointwise epilogue and row reductions on its output,
  (b) reduction / normalisation / softmax / loss chains with their pointwise neighbours, and the
      row gather that picks one element of each row they reduce (cross-entropy's target
      log-probability), which then never leaves the kernel,
  (c) attention ops alone,
  (d) pure pointwise chains;
a reduction over a group's per-row results (the mean of a loss) starts a group of its own: it
reduces other rows than the group's kernel, which cannot reduce across its programs. A group
keeps one domain: no output larger than its anchor's or what its reductions read, no node tied
to it only through a scalar while they hold tensors of other sizes, no GEMM epilogue op on a
select, split piece or permute of the GEMM's output nor a smaller value through one in any
group (copies aside, but not reductions over them): the lowering refuses such a group whole
(domain_rules.py). Views and
constants join the group that alone consumes them. A merge is taken if the merged group stays
convex (no path leaves it and comes back), so replacing any group by one op keeps the graph
acyclic - the same condition `fuser_utils.validate_partition` checks, computed here with
ancestor bitsets so each test is O(group inputs) instead of a graph walk.
Must not: build subgraph modules or keys (subgraph.py does).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch.fx as fx

from .domain_rules import ANCHORS as _ANCHORS
from .domain_rules import DomainRules
from .group import Group
from .ops import (
    Role,
    op_name,
    reduction_signature,
    role,
    row_gather_signature,
)

# Normalisations stay out of GEMM epilogues (which may end in softmax-style row reductions): their
# variance and root steps mark a norm chain, grouped alone, or every Linear -> LayerNorm is one.
_NOT_IN_GEMM = {
    "aten::mean",
    "aten::var_mean",
    "aten::var",
    "aten::std",
    "aten::rsqrt",
    "aten::native_layer_norm",
    "aten::_fused_rms_norm",
}


# The widest row a GEMM epilogue can reduce: codegen's largest GEMM tile (BLOCK_N); a row
# reduction fused into a GEMM needs each output row in one tile (tests check the two agree).
MAX_GEMM_EPILOGUE_ROW = 256


class _Partitioner(DomainRules):
    def __init__(self, graph: fx.Graph) -> None:
        self.nodes = list(graph.nodes)
        self.index = {n: i for i, n in enumerate(self.nodes)}
        self.roles = {n: role(n) for n in self.nodes}
        # anc[n]: bitset of every node n depends on (transitively).
        self.anc: dict[fx.Node, int] = {}
        for n in self.nodes:
            bits = 0
            for a in n.all_input_nodes:
                bits |= self.anc[a] | (1 << self.index[a])
            self.anc[n] = bits
        self.group_of: dict[fx.Node, Group] = {}

    # -- convexity -----------------------------------------------------------------------
    def _convex(self, members: Iterable[fx.Node], mask: int) -> bool:
        """A node set is convex iff none of its external inputs depends on a member."""
        for n in members:
            for a in n.all_input_nodes:
                if not (mask >> self.index[a]) & 1 and self.anc[a] & mask:
                    return False
        return True

    def _try_merge(
        self, groups: list[Group], node: fx.Node | None, read: bool = False
    ) -> Group | None:
        """Merge `groups` (and `node`) into the first group if legal (with `read`, within
        what its reductions read too: domain_rules); return it or None."""
        members = [m for g in groups for m in g.nodes]
        mask = 0
        for g in groups:
            mask |= g.mask
        if node is not None:
            members.append(node)
            mask |= 1 << self.index[node]
        if not self._within_domain(members, read) or not self._convex(members, mask):
            return None
        head = groups[0]
        for g in groups[1:]:
            head.anchor = head.anchor or g.anchor
            head.row_signature = head.row_signature or g.row_signature
            head.reductions += g.reductions
        head.nodes = sorted(members, key=self.index.__getitem__)
        head.mask = mask
        for m in members:
            self.group_of[m] = head
        return head

    def _new_group(self, node: fx.Node) -> Group:
        g = Group(nodes=[node], mask=1 << self.index[node])
        self.group_of[node] = g
        return g

    # -- rules ---------------------------------------------------------------------------
    def _producer_groups(self, node: fx.Node) -> list[Group]:
        seen: list[Group] = []
        for a in node.all_input_nodes:
            g = self.group_of.get(a)
            if g is not None and not g.attention and all(g is not s for s in seen):
                seen.append(g)
        # Anchored and reduction groups first: an epilogue belongs with its anchor.
        seen.sort(key=lambda g: (g.anchor is None, g.reductions == 0))
        return seen

    def _reduction_fits(self, g: Group, sig: tuple | None) -> bool:
        if sig is None:
            return False
        if g.row_signature is None:
            if g.anchor is Role.GEMM:
                # Row reductions on the GEMM output: reduce the last dim only, and only rows
                # one GEMM tile holds. A wider row (an LM head's vocabulary) starts its own row
                # group: joined, it would make the whole group, GEMM included, unlowerable.
                shape, dims = sig
                return dims == (len(shape) - 1,) and shape[-1] <= MAX_GEMM_EPILOGUE_ROW
            return g.anchor is None
        # Only the group's own rows: a second-level reduction over its per-row results (the mean
        # of a loss) reduces across the rows one program owns, which no template does.
        return bool(sig == g.row_signature)

    def _compatible(self, a: Group, b: Group) -> bool:
        """May two existing groups become one?"""
        if a.anchor is not None and b.anchor is not None:
            return False
        if a.reductions and b.reductions and a.row_signature != b.row_signature:
            return False
        return not (
            (a.anchor is Role.CONV and b.reductions) or (b.anchor is Role.CONV and a.reductions)
        )

    def _place(self, node: fx.Node) -> None:
        r = self.roles[node]
        if r is Role.GETITEM:
            src = node.args[0]
            g = self.group_of.get(src) if isinstance(src, fx.Node) else None
            if g is not None:
                self._try_merge([g], node)
            return
        if r is Role.ATTENTION:
            self._new_group(node).attention = True
            return
        if r is Role.ROW_GATHER:
            self._place_row_gather(node)
            return
        if r in _ANCHORS:
            self._new_group(node).anchor = r
            return
        if r is Role.VIEW:
            # A view inside a chain joins its producer; trailing views are trimmed later.
            src = node.all_input_nodes[0] if node.all_input_nodes else None
            g = self.group_of.get(src) if src is not None else None
            if g is not None and not g.attention:
                self._try_merge([g], node)
            return
        if r not in (Role.POINTWISE, Role.REDUCTION):
            return
        sig = reduction_signature(node) if r is Role.REDUCTION else None
        producers = self._producer_groups(node)
        for head in producers:
            if r is Role.REDUCTION and not self._reduction_fits(head, sig):
                continue
            if head.anchor is Role.CONV and r is Role.REDUCTION:
                continue
            if head.anchor is not None and op_name(node) in _NOT_IN_GEMM:
                continue
            if self._scalar_bridge(head, node) or self._reindexes(head, node):
                continue
            merged = self._try_merge([head], node, r is Role.POINTWISE)
            if merged is None:
                continue
            if r is Role.REDUCTION:
                merged.reductions += 1
                merged.row_signature = merged.row_signature or sig
            # Pull the other producers' pointwise chains in too when legal (not into anchored
            # groups: those hold the anchor and what is downstream of it, nothing beside it).
            for other in producers:
                if (
                    merged.anchor is None
                    and other is not merged
                    and not other.anchor
                    and not other.reductions
                ) and self._compatible(merged, other):
                    self._try_merge([merged, other], None)
            return
        g = self._new_group(node)
        if r is Role.REDUCTION:
            g.reductions = 1
            g.row_signature = sig

    def _place_row_gather(self, node: fx.Node) -> None:
        """A row gather joins the group that reduces the rows it picks from (its source's group,
        with the same row signature); with no such group it stays with the fallback, like any
        other gather. Its index's pointwise chain (cross-entropy's ignore_index select) comes
        along when legal."""
        src = node.args[0]
        g = self.group_of.get(src) if isinstance(src, fx.Node) else None
        if g is None or g.attention or g.row_signature != row_gather_signature(node):
            return
        merged = self._try_merge([g], node)
        if merged is None:
            return
        for other in self._producer_groups(node):
            if (
                merged.anchor is None
                and other is not merged
                and not other.anchor
                and not other.reductions
                and self._compatible(merged, other)
            ):
                self._try_merge([merged, other], None)

    def _absorb_feeders(self) -> None:
        """Pull views/constants whose every user sits in one group into that group
        (e.g. the weight transpose feeding a GEMM)."""
        for node in reversed(self.nodes):
            if node in self.group_of or self.roles[node] not in (Role.VIEW, Role.FACTORY):
                continue
            users = list(node.users)
            if not users:
                continue
            g = self.group_of.get(users[0])
            if g is None or g.attention or any(self.group_of.get(u) is not g for u in users):
                continue
            self._try_merge([g], node)

    def _sink_tails(self) -> None:
        """Move a pointwise/view/reduction node to the group that alone consumes it when its own
        group does not use it (greedy placement cannot see that a chain's head belongs to the
        norm below it, e.g. the pow of an RMSNorm after a GEMM + residual)."""
        moved = True
        while moved:
            moved = False
            for node in reversed(self.nodes):
                src = self.group_of.get(node)
                r = self.roles[node]
                if (
                    src is None
                    or r not in (Role.POINTWISE, Role.VIEW, Role.REDUCTION)
                    or len(src.nodes) == 1
                ):
                    continue
                users = list(node.users)
                dst = self.group_of.get(users[0]) if users else None
                if dst is None or dst is src or dst.attention:
                    continue
                if any(self.group_of.get(u) is not dst for u in users):
                    continue
                # Anchored groups keep their epilogue and take no prologue; from them only a pure
                # reduction prologue (x*x feeding a mean) moves down to its reduction.
                if dst.anchor is not None:
                    continue
                if src.anchor is not None and (
                    r is not Role.POINTWISE
                    or any(self.roles[u] is not Role.REDUCTION for u in users)
                ):
                    continue
                bit = 1 << self.index[node]
                if r is Role.REDUCTION and dst.row_signature not in (
                    None,
                    reduction_signature(node),
                ):
                    continue
                rest = [n for n in src.nodes if n is not node]
                if not any(
                    self.roles[n] not in (Role.VIEW, Role.GETITEM, Role.FACTORY) for n in rest
                ):
                    continue
                joined = [*dst.nodes, node]
                fits = self._within_domain(joined, True)
                if not fits or not self._convex(joined, dst.mask | bit):
                    continue
                if not self._convex(rest, src.mask & ~bit):
                    continue
                src.nodes = rest
                src.mask &= ~bit
                dst.nodes = sorted(joined, key=self.index.__getitem__)
                dst.mask |= bit
                self.group_of[node] = dst
                moved = True

    def _trim_trailing_views(self, g: Group) -> None:
        """Views whose users all lie outside the group add nothing but a copy: leave them out."""
        changed = True
        while changed:
            changed = False
            for node in reversed(g.nodes):
                if not self._is_view(node) or len(g.nodes) == 1:
                    continue
                if all(self.group_of.get(u) is not g for u in node.users):
                    g.nodes.remove(node)
                    g.mask &= ~(1 << self.index[node])
                    del self.group_of[node]
                    changed = True

    def run(self) -> list[Group]:
        for node in self.nodes:
            self._place(node)
        self._sink_tails()
        self._absorb_feeders()
        groups: list[Group] = []
        for g in {id(g): g for g in self.group_of.values()}.values():
            self._trim_trailing_views(g)
            if any(self.roles[n] not in (Role.VIEW, Role.FACTORY, Role.GETITEM) for n in g.nodes):
                groups.append(g)  # a group of views and constants alone computes nothing
        groups.sort(key=lambda g: self.index[g.nodes[0]])
        return groups


def partition(graph: fx.Graph) -> list[Group]:
    """Split `graph` into convex fusable groups, in graph order. Nodes in no group stay with the
    fallback (placeholders, outputs, gathers/scatters, random ops, mutations)."""
    return _Partitioner(graph).run()
