"""Attention's random-number state without dropout: unset outputs made zeros.

CUDA's flash, efficient and cuDNN attention forwards return the state their dropout used (the
philox seed and offset, or `rng_state`), and AOTAutograd saves it for the backward op. Without
dropout the backward never reads it and the forward leaves it unset: whatever memory held (seen
on an H100: 4539628424878424895 in one run, 16 in the next). As outputs of an attention
subgraph these are values no kernel can reproduce, so the subgraph could never be replaced in a
training forward. Here, where `dropout_p` is 0, their uses read a zero tensor of the same
shape, dtype and device instead, and their getitems go.

Owns: `zero_unset_rng_outputs(gm) -> int` (outputs replaced), `zeros_node`.
Must not: touch a forward with dropout, or any other output.
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx

from .ops import is_attention_op

_RNG = ("philox_seed", "philox_offset", "rng_state", "unused")  # the ops' return names


def _rng_indices(node: fx.Node) -> set[int]:
    """Indices of `node`'s outputs that hold dropout's random-number state, if it has none
    (dropout_p 0); else the empty set."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or not is_attention_op(node):
        return set()
    schema = target._schema
    names = [a.name for a in schema.arguments]
    if "dropout_p" not in names:
        return set()
    position = names.index("dropout_p")
    dropout = node.kwargs.get(
        "dropout_p", node.args[position] if position < len(node.args) else 0.0
    )
    if not isinstance(dropout, (int, float)) or float(dropout) != 0.0:
        return set()
    return {i for i, r in enumerate(schema.returns) if r.name in _RNG}


def zeros_node(graph: fx.Graph, like: torch.Tensor) -> fx.Node:
    """A node making zeros of `like`'s shape, dtype and device, in an op Inductor lowers as it
    is (`aten.full`: the graphs here are past its decompositions, and `aten.zeros` is not,
    H100, 2026-12-07: "both a fallback and a decomp for same op: aten.zeros.default")."""
    return graph.call_function(
        torch.ops.aten.full.default,
        (list(like.shape), 0),
        {"dtype": like.dtype, "device": like.device},
    )


def zero_unset_rng_outputs(gm: fx.GraphModule) -> int:
    graph = gm.graph
    done = 0
    for node in list(graph.nodes):
        indices = _rng_indices(node) if node.op == "call_function" else set()
        for user in list(node.users):
            if user.target is not operator.getitem or user.args[1] not in indices:
                continue
            val = user.meta.get("val")
            if not isinstance(val, torch.Tensor):
                continue
            with graph.inserting_after(user):
                zero = zeros_node(graph, val)
            zero.meta.update(user.meta)
            user.replace_all_uses_with(zero)
            graph.erase_node(user)
            done += 1
    if done:
        gm.recompile()
    return done
