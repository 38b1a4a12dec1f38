"""Subgraphs the lowering refuses for a value it cannot give one index map (`MapConflict`:
read at two maps, a row reduction read per column, an output off the domain), cut until their
parts lower (fx_passes/split.py cuts where the error says; this module checks the parts).

CLIP's backward (its symmetric cross-entropy's two gradients, one transposed, summed in one
group), a GCN's normalised adjacency backward and a VAE's backward (the KL term's latent
gradients beside the reconstruction's row reduction) went whole to the fallback; cut, their
parts lower. So did Conformer's depthwise conv1d backward, whose tail reads the input gradient
transposed: cut, the backward runs on the depthwise template and the tail as a pointwise kernel.

Owns: `split_refused(subgraphs, precision_option)`.
Must not: change which groups the partitioner forms (domain_rules.py keeps the cases it can
see from the graph alone out of a group in the first place).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ..codegen.errors import MapConflict, Unsupported
from ..fx_passes import Subgraph
from ..fx_passes.split import SPLIT_KINDS, split_at
from .lower import lower

log = logging.getLogger("kernelpro")

# Cuts per subgraph: each adds a kernel boundary (a round trip through memory), so a group
# that needs more is left whole to the fallback.
MAX_CUTS = 3


def split_refused(
    subgraphs: Sequence[Subgraph], precision_option: str = "auto", cuts: int = MAX_CUTS
) -> list[Subgraph]:
    """`subgraphs` in order, each that the lowering refuses with `MapConflict` replaced by its
    parts when at most `cuts` cuts make every part lower; the rest unchanged.
    `precision_option`: the one `find_subgraphs` was given (a convolution's other part takes
    the precision of its own kind)."""
    out: list[Subgraph] = []
    for sg in subgraphs:
        parts = _lowering_parts(sg, cuts, precision_option) or [sg]
        if len(parts) > 1:
            log.info(
                "%s %s is no one kernel's domain: cut into %d subgraphs (%s)",
                sg.graph,
                sg.pattern,
                len(parts),
                ", ".join(p.pattern for p in parts),
            )
        out += parts
    return out


def _lowering_parts(sg: Subgraph, cuts: int, precision_option: str) -> list[Subgraph] | None:
    """[`sg`] when it lowers, else its parts when at most `cuts` cuts make each of them lower
    (each part lowered once), else None."""
    if sg.symbolic or sg.kind not in SPLIT_KINDS:
        return None
    try:
        lower(sg)
        return [sg]
    except MapConflict as e:
        can_cut = cuts and e.cut is not None
        halves = split_at(sg, e.cut, precision_option) if can_cut else None
        if halves is None:
            return None
        parts: list[Subgraph] = []
        for half in halves:
            got = _lowering_parts(half, cuts - 1, precision_option)
            if got is None:
                return None
            parts += got
        return parts if len(parts) - 1 <= cuts else None
    except Unsupported:
        return None
    except Exception:  # a lowering bug: the subgraph stays whole, as the search would leave it
        log.exception("lowering %s %s failed", sg.graph, sg.pattern)
        return None
