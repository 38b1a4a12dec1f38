"""The torch-level rewrites a compile makes on Dynamo's graph, before AOTAutograd, in order.

Owns: `torch_rewrites` (which rewrites the options allow, run in place, counted) and
`placeholder_values` (the compile-time value of each graph input, what a rewrite may rely on).
Must not: match anything itself (attention_rewrite.py, sdpa_mask.py, sdpa_mask_layout.py,
linear_ce_rewrite.py and pad_gemm.py do) or guard values at runtime (rewrite/guarded.py does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch.fx as fx

from ..options import Options
from .attention_rewrite import rewrite_attention
from .linear_ce_rewrite import rewrite_linear_cross_entropy
from .pad_gemm import pad_unaligned_gemms
from .sdpa_mask import simplify_sdpa_masks
from .sdpa_mask_layout import contiguous_sdpa_masks
from .torch_level import ChainNote

# The options that turn the rewrites on, in the order they run.
REWRITE_OPTIONS = ("rewrite_attention", "rewrite_linear_cross_entropy", "rewrite_pad_gemm")


def any_rewrite(opts: Options) -> bool:
    """Whether the options allow any torch-level rewrite."""
    return any(getattr(opts, name) for name in REWRITE_OPTIONS)


def torch_rewrites(
    gm: fx.GraphModule,
    opts: Options,
    values: Mapping[fx.Node, Any] | None = None,
    relied: list[fx.Node] | None = None,
    notes: list[ChainNote] | None = None,
) -> dict[str, int]:
    """The torch-level rewrites the options allow, made on a Dynamo graph in place (before
    AOTAutograd), in the order a compile makes them: {rewrite: how many}. With the
    placeholders' compile-time `values`, a rewrite may rely on them (a buffer holding a causal
    mask); it names those placeholders in `relied`, whose values the caller must guard.
    `notes` collects each candidate chain, made or refused with its reason (explain)."""
    made = {}
    if opts.rewrite_attention:
        made["attention"] = rewrite_attention(gm, values, relied, notes)
        made["attention_mask"] = simplify_sdpa_masks(gm, notes, values)
        made["attention_mask_layout"] = contiguous_sdpa_masks(gm, notes)
    if opts.rewrite_linear_cross_entropy:
        made["linear_cross_entropy"] = rewrite_linear_cross_entropy(gm, notes)
    if opts.rewrite_pad_gemm:  # after the LM head + loss: the linears it left
        made["pad_gemm"] = pad_unaligned_gemms(gm, notes)
    return made


def placeholders(gm: fx.GraphModule) -> list[fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


def placeholder_values(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> dict[fx.Node, Any]:
    """Each placeholder of a Dynamo graph with the input the backend was given for it (what
    `torch_rewrites` may rely on)."""
    return dict(zip(placeholders(gm), example_inputs, strict=False))
