"""A group of graph nodes that becomes one subgraph: the partitioner's unit (partition.py
builds them, domain_rules.py reads them, subgraph.py turns them into modules).

Owns: `Group`.
Must not: decide which nodes join a group.
"""

from __future__ import annotations

import dataclasses

import torch.fx as fx

from .ops import Role, role


@dataclasses.dataclass
class Group:
    """A set of nodes that becomes one subgraph."""

    nodes: list[fx.Node]
    mask: int  # bitset of node indices
    anchor: Role | None = None  # GEMM / CONV when the group holds one
    attention: bool = False
    row_signature: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    reductions: int = 0

    @property
    def kind(self) -> str:
        if self.attention:
            return "attention"
        if self.anchor is not None:
            return self.anchor.value
        if any(role(n) is Role.REDUCTION for n in self.nodes):
            return "reduction"
        return "pointwise"
