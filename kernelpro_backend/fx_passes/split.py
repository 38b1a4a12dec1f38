"""Cutting a subgraph in two where the lowering found a value it cannot give one index map.

A group can be convex and still have no domain: CLIP's backward adds the gradient of the
logits' cross-entropy to the transpose of the gradient of their transpose's, and both read the
same one-hot term and row sums, once row by row and once column by column. No template computes
one value at two layouts, so the lowering refuses the group whole (`MapConflict`); so it does a
GCN's row sums read per column (D^-1/2 A D^-1/2), and an output off the group's domain. Cut
below the node the error names (the read that gave the second map, the reduction, the
output): one part is that node with every member it depends on, and the other part is the
rest, which then reads the first part's values as inputs, where any index map is a load.
Both parts stay convex. The first is closed under the group's ancestors, so no path from the
second leads back into it; the group was convex, so no path leaves the group and returns.

A convolution group is cut the same way: Conformer's depthwise conv1d backward reads its input
gradient (N, C, T) transposed to (N, T, C) in GLU's backward, so the backward (with every
gradient it picks: a tuple is no kernel's input or output) becomes its own part and the tail
a pointwise one. A part without the convolution takes the precision a group of its kind gets
(`precision_policy`: the matmul setting, not cuDNN's TF32 one).

Owns: `split_at(subgraph, cut, precision_option)`.
Must not: lower (lowering/split.py decides where to cut and whether the parts lower).
"""

from __future__ import annotations

import torch.fx as fx

from .group import Group
from .keys import precision_policy
from .ops import Role, role
from .subgraph import Subgraph, subgraph_of_group

_NO_COMPUTE = (Role.VIEW, Role.GETITEM, Role.FACTORY)
# the kinds of group a cut may split (lowering/split.py tries only these)
SPLIT_KINDS = ("gemm", "conv", "reduction", "pointwise")


def _ancestors(node: fx.Node, members: set[fx.Node]) -> set[fx.Node]:
    """`node` and every member it depends on through members."""
    seen = {node}
    stack = [node]
    while stack:
        for a in stack.pop().all_input_nodes:
            if a in members and a not in seen:
                seen.add(a)
                stack.append(a)
    return seen


def split_at(
    subgraph: Subgraph, cut: fx.Node, precision_option: str = "auto"
) -> list[Subgraph] | None:
    """The two parts of `subgraph` cut below `cut`: `cut` with the members it depends
    on, then the rest (both in graph order), or None where a part would compute nothing or
    the subgraph is not a GEMM, convolution, reduction or pointwise group.
    `precision_option`: the one the subgraph was found with, for a convolution's other part."""
    if subgraph.kind not in SPLIT_KINDS or subgraph.symbolic:
        return None
    members = set(subgraph.nodes)
    if cut not in members:
        return None
    first = _ancestors(cut, members)
    # trailing views of the first part that only the rest reads go with the rest
    for n in reversed(subgraph.nodes):
        if n in first and role(n) is Role.VIEW and not any(u in first for u in n.users):
            first.discard(n)
    # every pick of a tuple stays with the op that makes it (a convolution backward's three
    # gradients, var_mean's two statistics): the other part would read a tuple
    first |= {n for n in subgraph.nodes if role(n) is Role.GETITEM and n.args[0] in first}
    parts = [
        [n for n in subgraph.nodes if n in first],
        [n for n in subgraph.nodes if n not in first],
    ]
    if any(all(role(n) in _NO_COMPUTE for n in part) for part in parts):
        return None
    out = []
    for nodes in parts:
        anchor = next((role(n) for n in nodes if role(n) in (Role.GEMM, Role.CONV)), None)
        group = Group(nodes=nodes, mask=0, anchor=anchor)
        group.reductions = sum(role(n) is Role.REDUCTION for n in nodes)
        precision = subgraph.precision
        if subgraph.kind == "conv" and group.kind != "conv":
            precision = precision_policy(precision_option)
        out.append(subgraph_of_group(group, subgraph.graph, precision))
    return out
