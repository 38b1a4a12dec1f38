"""What the cache stores for a search's outcome.

A generated kernel that won is stored with its figures (ms, and the joules where the search
measured them, objective "energy"); where a baseline won, eager ATen is stored if it beat the
Inductor fallback (tuner/eager.py), else nothing: the fallback runs already.

Under objective "energy" the winner is the energy rule's pick (search/winner.py). Where the time
rule picked another, the entry is marked `objective="energy"`: the finder serves it under
"energy" only, by its stored figures against the fallback (tuner/payoff.py: it clears the time
rule, or `for_joules`). So the stored entry is one the finder will serve: the energy rule's pick
where it passes that check, else the time rule's pick (a refused entry would run the fallback, slower than both;
measured on H100, softmax 8192^2 fp32: candidates 0.2-0.4% slower than Inductor at 19-24%
fewer joules, docs/gpu_runs/2026-12-06-energy). Where the energy rule picks the fallback
itself, nothing is stored.

Owns: `outcome_artifact`, `eager_or_none`.
Must not: search, measure, or read or write the cache (finder.py does).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..cache.artifact import KernelArtifact, Provenance
from ..fx_passes import Subgraph
from ..options import Options
from ..search import SearchOutcome
from ..search.winner import ENERGY_TIME_TOLERANCE
from .artifacts import winner_fields
from .eager import clear_win, eager_artifact
from .payoff import clears, for_joules, needed_ms

log = logging.getLogger("kernelpro")


def outcome_artifact(
    outcome: SearchOutcome, subgraph: Subgraph, log_path: str, cubin_dir: Path, options: Options
) -> KernelArtifact | None:
    """What the cache stores for `outcome` (its winner under the rule it was made or `under`;
    module docstring), or None where the fallback stays."""
    if not _for_joules_only(outcome):
        return _pick_artifact(outcome, subgraph, log_path, cubin_dir, options)
    if outcome.winner == options.fallback:
        return None  # the energy rule keeps the fallback, which runs already (no eager tie)
    artifact = _pick_artifact(outcome, subgraph, log_path, cubin_dir, options)
    behind_op = bool(subgraph.family)  # an instance of a symbolic subgraph: behind its dispatcher
    if artifact is not None and (
        clears(artifact, options, behind_op)
        or for_joules(artifact, options.fallback, needed_ms(artifact, options, behind_op))
    ):
        return artifact
    won = outcome.winner if outcome.uses_fallback else f"kernel #{outcome.winner_id}"
    log.info(
        "%s %s: the energy rule's pick (%s) saves no joules beyond the spread against %s "
        "within %.0f%% of its time; storing the time rule's",
        subgraph.graph, subgraph.pattern, won, options.fallback, 100 * ENERGY_TIME_TOLERANCE,
    )  # fmt: skip
    return outcome_artifact(outcome.under("time"), subgraph, log_path, cubin_dir, options)


def _for_joules_only(outcome: SearchOutcome) -> bool:
    """Whether the outcome's winner is the energy rule's pick where the time rule's is another."""
    time_pick = outcome.choices.get("time")
    if time_pick is None:
        return False
    if outcome.winner_id is not None or time_pick.node_id is not None:
        return outcome.winner_id != time_pick.node_id
    return outcome.winner != time_pick.winner


def _joules(outcome: SearchOutcome, energy_j: float | None) -> dict[str, Any]:
    """The artifact's joule fields (empty where the search measured none) and its rule."""
    found = {k: r.energy_j for k, r in outcome.baselines.items() if r.ok and r.energy_j}
    rule = "energy" if _for_joules_only(outcome) else "time"
    return {"kernel_j": energy_j, "baselines_j": found, "objective": rule}


def _pick_artifact(
    outcome: SearchOutcome, subgraph: Subgraph, log_path: str, cubin_dir: Path, options: Options
) -> KernelArtifact | None:
    if outcome.uses_fallback or outcome.result is None:
        return _baseline_artifact(outcome, subgraph, log_path, options)
    return KernelArtifact(
        **winner_fields(outcome.winner, device=subgraph.device, cubin_dir=cubin_dir),
        kernel_ms=outcome.result.median_ms,
        baselines_ms={k: r.median_ms for k, r in outcome.baselines.items() if r.ok and r.median_ms},
        sol_fraction=outcome.result.sol_fraction,
        provenance=Provenance(search_log=log_path),
        accuracy={
            k: float(v)
            for k, v in outcome.result.details.items()
            if k in ("max_abs_error", "ieee_max_abs_error")
        },
        **_joules(outcome, outcome.result.energy_j),
    )


def _baseline_artifact(
    outcome: SearchOutcome, subgraph: Subgraph, log_path: str, options: Options
) -> KernelArtifact | None:
    """A baseline won: eager ATen's entry where it beat Inductor (or, objective "energy", where
    the energy rule picked it for its joules), else None."""
    chosen = outcome.winner == "eager" and _for_joules_only(outcome)
    if chosen:
        log.info("%s %s: the energy rule picks eager ATen for its joules", subgraph.graph,
                 subgraph.pattern)  # fmt: skip
        eager = eager_artifact(outcome.baselines, options, log_path, chosen=True)
    else:
        log.info(
            "%s %s: the fallback (%s) stays fastest after %d trials",
            subgraph.graph,
            subgraph.pattern,
            outcome.winner,
            outcome.trials,
        )
        # No generated kernel beats the fastest baseline; that baseline may be eager ATen.
        eager = eager_artifact(outcome.baselines, options, log_path)
        eager = eager_or_none(eager, subgraph, outcome.baselines, options)
    if eager is None:
        return None
    return dataclasses.replace(eager, **_joules(outcome, outcome.baselines["eager"].energy_j))


def eager_or_none(
    artifact: KernelArtifact | None,
    subgraph: Subgraph,
    baselines: Mapping[str, Any],
    options: Options,
) -> KernelArtifact | None:
    """`artifact`, with a log line saying whether eager beats or ties with Inductor alone."""
    if artifact is not None:
        eager, inductor = baselines["eager"], baselines["inductor"]
        tentative = not clear_win(eager, inductor, options)
        log.info(
            "%s %s: eager ATen (%.4g ms) %s Inductor (%.4g ms) alone; it runs behind "
            "kernelpro::launch%s",
            subgraph.graph, subgraph.pattern, eager.median_ms,
            "ties with" if tentative else "beats", inductor.median_ms,
            " where the in-context verdict keeps it (a near tie)" if tentative else "",
        )  # fmt: skip
    return artifact
