"""Whether a cached entry pays off on a launch path: the rule the finder serves entries by.

The time rule: an entry is served if, when it was measured, it saved this launch path's minimum
gain over the fallback (`clears`; an entry found with inlined launches may not pay through the
op); or, with the in-context verdict on and on the static path, if it ties with the fallback
alone (tuner/eager.py NEAR_TIE): served tentatively, for the verdict to decide.

The energy rule, for an entry that objective "energy"'s rule chose where the time rule would not
(`KernelArtifact.objective` "energy": search/winner.py weighs every proved kernel within
ENERGY_TIME_TOLERANCE of the time rule's pick, its replacement cost charged): under objective
"energy" it is served if, by the figures it was stored with (no GPU call here), its time with
this launch path's cost is within that tolerance of the fallback's and its joules are more than
ENERGY_NOISE (the counter's repeat spread) below the fallback's (`for_joules`); it is not
tentative. Under "time" such an entry is served only if it clears the time rule, never as a
near tie: a cache shared with an "energy" user cannot slow a "time" user down.

Owns: `needed_ms`, `clears`, `for_joules`, `firm` (served without the verdict's say) and
`pays_off` (with its log lines).
Must not: measure, load or store anything, or read the cache (finder.py does).
"""

from __future__ import annotations

import logging

from ..cache.artifact import KernelArtifact
from ..options import Options
from ..search.winner import ENERGY_NOISE, ENERGY_TIME_TOLERANCE
from .artifacts import surcharge_ms
from .eager import is_eager, near_tie

log = logging.getLogger("kernelpro.cache")


def needed_ms(artifact: KernelArtifact, options: Options, behind_op: bool = False) -> float:
    """What the entry must save over the fallback on its launch path: the op's minimum gain
    behind kernelpro::launch (`behind_op`, or an eager entry, which always runs there), else the
    inlined one; plus a host path's surcharge (a CUTLASS call)."""
    op = behind_op or is_eager(artifact)
    need = options.op_min_gain_ms() if op else options.min_gain_ms()
    return need + surcharge_ms(artifact)


def clears(artifact: KernelArtifact, options: Options, behind_op: bool = False) -> bool:
    """Whether the artifact's isolated gain over the fallback is what its launch path needs
    (an artifact without figures: only a generated kernel, whose search proved it)."""
    base = artifact.baselines_ms.get(options.fallback)
    if base is None or artifact.kernel_ms is None:
        return not is_eager(artifact)
    return base - artifact.kernel_ms >= needed_ms(artifact, options, behind_op)


def for_joules(artifact: KernelArtifact, fallback: str, need_ms: float) -> bool:
    """Whether an entry the energy rule chose is worth its place against `fallback` by its
    stored figures: its ms plus `need_ms` within ENERGY_TIME_TOLERANCE of the fallback's, its
    joules more than ENERGY_NOISE below the fallback's (no figure: no)."""
    base_ms, base_j = artifact.baselines_ms.get(fallback), artifact.baselines_j.get(fallback)
    if artifact.objective != "energy" or None in (artifact.kernel_ms, artifact.kernel_j):
        return False
    if base_ms is None or base_j is None:
        return False
    ms, j = artifact.kernel_ms or 0.0, artifact.kernel_j or 0.0
    return ms + need_ms <= base_ms * (1 + ENERGY_TIME_TOLERANCE) and j < base_j * (1 - ENERGY_NOISE)


def firm(artifact: KernelArtifact, options: Options, behind_op: bool = False) -> bool:
    """Served without the in-context verdict's say: it clears the time rule, or under objective
    "energy" it is an energy entry that passes `for_joules`."""
    if clears(artifact, options, behind_op):
        return True
    need = needed_ms(artifact, options, behind_op)
    return options.objective == "energy" and for_joules(artifact, options.fallback, need)


def pays_off(artifact: KernelArtifact, options: Options, behind_op: bool = False) -> bool:
    """The rule (module docstring): firm, or a tentative near tie under the in-context verdict
    on the static path (a shape dispatcher's graph, `behind_op`, is never judged)."""
    if firm(artifact, options, behind_op):
        if not clears(artifact, options, behind_op):
            log.info(
                "cached %s kernel was chosen for its joules (%.4g J a call against %.4g for "
                "%s, %.4g ms against %.4g): served under objective \"energy\"",
                artifact.pattern, artifact.kernel_j, artifact.baselines_j.get(options.fallback),
                options.fallback, artifact.kernel_ms, artifact.baselines_ms.get(options.fallback),
            )  # fmt: skip
        return True
    base = artifact.baselines_ms.get(options.fallback)
    if base is None or artifact.kernel_ms is None:
        return False  # an eager entry without figures: its only merit is a measured gain
    if artifact.objective == "energy":
        log.info(
            "cached %s kernel was chosen for its joules under objective \"energy\" and does "
            "not %s; running the fallback",
            artifact.pattern,
            "clear the time rule" if options.objective == "time" else "save beyond the spread "
            f"at most {ENERGY_TIME_TOLERANCE:.0%} slower than {options.fallback} here",
        )  # fmt: skip
        return False
    if options.in_context and not behind_op and near_tie(artifact.kernel_ms, base):
        log.info(
            "cached %s kernel ties with %s alone (%.4g ms against %.4g); "
            "served tentatively, for the in-context verdict to decide",
            artifact.pattern, options.fallback, artifact.kernel_ms, base,
        )  # fmt: skip
        return True
    log.info(
        "cached %s kernel saves %.1f us over %s, under the %.1f us this "
        "launch path needs; running the fallback",
        artifact.pattern,
        (base - artifact.kernel_ms) * 1e3,
        options.fallback,
        needed_ms(artifact, options, behind_op) * 1e3,
    )
    return False
