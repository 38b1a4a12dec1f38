"""The program of a subgraph around one anchor node (a GEMM, a convolution, an input gradient)
whose result a template computes tile by tile: index maps from the anchor's domain, checked to
read the anchor's result at its own tile, and the program builder over them.

Owns: `anchored_program`.
Must not: choose a template or emit the anchor's own ops (lower.py, lower_conv*.py do).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch.fx as fx

from ..codegen import index as ix
from ..codegen.errors import Unsupported
from ..fx_passes import Subgraph
from .maps import MapBuilder
from .program import ProgramBuilder


def anchored_program(
    sg: Subgraph,
    anchor: fx.Node,
    domain: Sequence[Any],
    reduced: tuple[int, ...],
    outputs: Sequence[fx.Node],
    what: str,
) -> tuple[MapBuilder, dict[fx.Node, Any], ProgramBuilder]:
    """(map builder, maps, program builder) of `sg` with `anchor` over `domain`; raises
    Unsupported when `outputs` read `what` (the anchor's result) other than at its own tile.
    Maps leave out dims of extent 1 (an M or N of 1: matrix-vector products)."""
    builder = MapBuilder(sg.nodes, sg.inputs, domain, reduced)
    ident = [ix.dim(k) for k in range(len(domain))]
    builder.give(anchor, ident)
    maps = builder.run(outputs, anchor=anchor)
    if maps[anchor] != [builder.unit_dims_dropped(i) for i in ident]:
        raise Unsupported(f"{what} is read at {maps[anchor]}, not tile by tile")
    prog = ProgramBuilder(
        sg.inputs, maps, builder.selections, builder.store_predicates, builder.factory_reads
    )
    return builder, maps, prog
