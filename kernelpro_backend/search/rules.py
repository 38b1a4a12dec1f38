"""The built-in expert: findings and the roofline class mapped to knob changes.

Owns: `RuleProposer`. In order of trust: the findings' own `suggestion`s (a tool that saw spills
knows what to change), then rules by cause (register spills, occupancy limited by shared memory)
and by bottleneck class (memory/latency/compute/under-utilised), under objective "energy" the
moves that tend to save joules at nearly the same time (ENERGY_RULES), then one-knob steps to
the neighbouring legal values around a working candidate. Search memory's prior of each move is added
to its score, so moves that worked on the same kind of subgraph come first.
Must not: measure, or read anything but typed findings.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

from ..profilers.findings import Bottleneck, Finding, Severity
from .proposer import Proposal, ProposalRequest
from .space import KnobValue, move_name

UP, DOWN = "up", "down"
FASTEST_PRECISION = "fastest-precision"

# (role, UP | DOWN | a value | FASTEST_PRECISION); roles are the space's `knob_roles` (ROLE_NAMES)
Rule = tuple[str, Any]

BY_CLASS: dict[Bottleneck, tuple[Rule, ...]] = {
    # bytes move too slowly: wider loads, more rows per program, fewer passes over memory,
    # persistent programs that keep data on chip
    Bottleneck.MEMORY: (("vector", UP), ("rows", UP), ("passes", DOWN), ("persistent", True)),
    # too few waves or a serial chain: more programs (split-K, smaller tiles, fewer rows),
    # fewer warps per program
    Bottleneck.LATENCY: (("split", UP), ("tile", DOWN), ("rows", DOWN), ("warps", DOWN)),
    # math units wait: larger tiles for reuse, deeper pipelines, tensor-core precision if allowed
    Bottleneck.COMPUTE: (("tile", UP), ("stages", UP), ("precision", FASTEST_PRECISION)),
    # far from both roofs: more warps to hide latency, wider loads
    Bottleneck.UNDERUTILIZED: (("warps", UP), ("vector", UP), ("tile", DOWN)),
}
# Spills: an epilogue run on slices of the tile keeps fewer values live at once (first: it keeps
# the tile); a smaller tile holds less per thread; so does spreading it over more warps, up to 8
# (256 threads may use all 255 registers each; at 16+ warps the per-thread cap falls below 128
# and spills grow), so the warps go to 8 rather than down.
SPILL_RULES: tuple[Rule, ...] = (("subtile", UP), ("tile", DOWN), ("warps", 8))
SHARED_MEMORY_RULES: tuple[Rule, ...] = (("stages", DOWN),)
# Objective "energy" (search/winner.py chooses among candidates within 2% of the fastest): fewer
# warps and fewer pipeline stages keep fewer units and buffers busy for the same bytes; fewer
# CTAs per row (a smaller cluster, fewer splits) means fewer partial results exchanged and
# fewer barriers; larger tiles reuse each byte loaded more, so fewer bytes cross DRAM and L2
# (data movement costs more energy than the math). The measurement decides; these are only
# proposed, and only under that objective.
# A row kernel's grid capped at a share of the SMs (SM_SHARE: from one program a block to
# one an SM, then fewer): the same bytes from fewer SMs, the idle ones drawing less.
ENERGY_RULES: tuple[Rule, ...] = (
    ("warps", DOWN),
    ("stages", DOWN),
    ("split", DOWN),
    ("tile", UP),
    ("programs", 100),
    ("programs", DOWN),
)

# Roles the one-knob neighbour steps move only under objective "energy": a capped grid
# moves the same bytes in no less time, so a time search would spend trials on it for nothing.
ENERGY_ONLY_ROLES = frozenset({"programs"})

# float32 matmul modes allowed by a subgraph's precision policy, slowest (most exact) first.
ALLOWED_PRECISIONS = {
    "ieee": ("ieee",),
    "tf32x3": ("ieee", "tf32x3"),
    "tf32": ("ieee", "tf32x3", "tf32"),
}

# Scores: suggestions > cause/class rules > neighbours, unless memory says otherwise: a move
# remembered to gain +0.25 (~28%) adds +1.0 and overtakes a whole tier.
SUGGESTION, RULE, NEIGHBOUR = 3.0, 2.0, 1.0
MEMORY_WEIGHT = 4.0
_SEVERITY_ORDER = {Severity.HIGH: 0, Severity.MEDIUM: 1, Severity.LOW: 2, Severity.INFO: 3}


class RuleProposer:
    name = "rules"

    def __init__(
        self,
        allowed_precisions: Sequence[str] | None = None,
        memory_weight: float = MEMORY_WEIGHT,
        neighbours: bool = True,
        objective: str = "time",
    ) -> None:
        self.allowed_precisions = tuple(allowed_precisions) if allowed_precisions else None
        self.memory_weight = memory_weight
        self.neighbours = neighbours
        self.objective = objective

    def propose(self, request: ProposalRequest) -> list[Proposal]:
        space, parent = request.space, request.candidate
        values = space.knob_space(parent)
        if not values:
            return []  # free-form candidate: nothing the rules can turn
        current, roles = space.knobs(parent), space.knob_roles(parent)
        seen: set[Hashable] = {parent}
        out: list[Proposal] = []

        allowed = self.allowed_precisions or ALLOWED_PRECISIONS.get(
            getattr(request.subgraph, "precision", "ieee"), ("ieee",)
        )

        def add(changes: dict[str, KnobValue], reason: str, base: float) -> None:
            changes = {k: v for k, v in changes.items() if k in values and current.get(k) != v}
            if not changes or any(
                roles.get(k) == "precision" and v not in allowed for k, v in changes.items()
            ):
                return  # nothing to do, or a float32 mode the precision policy forbids
            try:
                child = space.with_knobs(parent, **changes)
            except space.illegal:
                return  # illegal combinations are skipped, as in tinygrad's search
            if child in seen or request.is_known(child):
                return
            seen.add(child)
            move = move_name(current, space.knobs(child))
            score = base - 0.001 * len(out) + self.memory_weight * request.move_prior(move)
            out.append(Proposal(child, move, reason, score))

        for f in sorted(request.findings, key=lambda f: _SEVERITY_ORDER.get(f.severity, 9)):
            if f.suggestion:
                add(dict(f.suggestion), f"finding:{f.tool}/{f.metric}", SUGGESTION)
        if request.result.ok:
            for reason, rules in _rules_for(request.findings, request.bottleneck):
                for role, target in rules:
                    for knob, value in _apply_rule(role, target, values, current, roles, allowed):
                        add({knob: value}, reason, RULE)
            if self.objective == "energy":
                for role, target in ENERGY_RULES:
                    for knob, value in _apply_rule(role, target, values, current, roles, allowed):
                        add({knob: value}, "objective:energy", RULE)
            if self.neighbours:
                # Interleaved across knobs (first step of every knob, then the second, ...): one
                # knob whose every other value fails must not close the node (dead-end rule)
                # before the other knobs had a turn.
                steps = {
                    k: neighbour_values(values[k], current.get(k))
                    for k in sorted(values)
                    if self.objective == "energy" or roles.get(k) not in ENERGY_ONLY_ROLES
                }
                for rank in range(max((len(v) for v in steps.values()), default=0)):
                    for knob, options in steps.items():
                        if rank < len(options):
                            add({knob: options[rank]}, "neighbour", NEIGHBOUR)
        out.sort(key=lambda p: -p.score)  # stable: ties keep the order above
        return out


def _rules_for(
    findings: Iterable[Finding], bottleneck: Bottleneck | None
) -> list[tuple[str, tuple[Rule, ...]]]:
    found = []
    for f in findings:
        metric = f.metric.lower()
        if "spill" in metric and _positive(f.value):
            found.append((f"finding:{f.tool}/{f.metric}", SPILL_RULES))
        elif metric.startswith(("occupancy", "limiting")) and "shared" in str(f.value).lower():
            found.append((f"finding:{f.tool}/{f.metric}", SHARED_MEMORY_RULES))
    if bottleneck is not None:
        found.append((f"roofline:{bottleneck.value}", BY_CLASS[bottleneck]))
    return found


def _positive(value: float | str) -> bool:
    try:
        return float(value) > 0
    except ValueError:
        return False


def _apply_rule(
    role: str,
    target: Any,
    values: dict[str, tuple[KnobValue, ...]],
    current: dict[str, KnobValue],
    roles: dict[str, str],
    allowed_precisions: Sequence[str],
) -> list[tuple[str, KnobValue]]:
    """(knob, new value) for every knob of the role that can move as the rule says."""
    out = []
    for knob in sorted(values):
        if roles.get(knob) != role:
            continue
        legal, now = values[knob], current.get(knob)
        if target == FASTEST_PRECISION:
            usable = [p for p in allowed_precisions if p in legal]
            new = usable[-1] if usable else None
        elif target in (UP, DOWN):
            new = _step(legal, now, target)
        else:
            new = target if target in legal else None
        if new is not None and new != now:
            out.append((knob, new))
    return out


def _numeric(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _step(legal: Sequence[KnobValue], now: KnobValue, direction: str) -> KnobValue | None:
    """The next legal value above/below `now` (numbers only)."""
    if not _numeric(now):
        return None
    nums = sorted(v for v in legal if _numeric(v))
    if direction == UP:
        return next((v for v in nums if v > now), None)
    return next((v for v in reversed(nums) if v < now), None)


def neighbour_values(legal: Sequence[KnobValue], now: KnobValue) -> list[KnobValue]:
    """One step down and up for numbers; every other value for strings and booleans (the
    search's neighbour moves; the row sweep's ring uses them too)."""
    if _numeric(now):
        return [v for v in (_step(legal, now, DOWN), _step(legal, now, UP)) if v is not None]
    return [v for v in legal if v != now]
