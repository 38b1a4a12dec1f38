"""Which of a graph's kernels the in-context verdict keeps: the variants it times, its budget,
and the decision with its reasons.

The first trial times the graph with all its kernels against the fallback's own graph. A graph
with more than one kernel then times variants that each leave one kernel out (at most
`MAX_LEAVE_OUT`, compiled only as the budget allows): against the fallback's graph when the
graph with all of them was not faster beyond noise (which set, if any, beats the fallback?), and
against the graph with all of them when it was (is one of them a loser?). The kept set is the
timed variant that won by the largest ratio, or all of them (first trial won, no leave-one-out
won), or none; never a set no trial timed. Kernels are left out in `leave_out_order`: doubtful
ones first (tentative near ties, no isolated figures, or an isolated gain under
`ISOLATED_MARGIN`: their isolated figure says least), then the largest isolated gain in ms
first (the kernels that move the graph's time most when they are wrong).

Objective "energy" (`tolerance`: the energy rule's time tolerance): the kernels were chosen
for fewer joules at most that much slower alone, so a trial that adds firmly served kernels
keeps them unless the graph is slower with them beyond the tolerance (verdict_timing.decide's
margin `-tolerance`), and one that takes such kernels out drops them only where the graph is
faster without them beyond it (`+tolerance`); a trial that adds or takes out a tentative
kernel (a near tie) keeps the time rule's MARGIN. The verdict times only: NVML's energy
counter steps every 20-100 ms by ~1 mJ (profilers/energy.py), and the verdict's calls
alternate variant by variant, so no joule figure per variant can be read from them; the joules
are the isolated measurement's.

Budget: the verdict's extra compiles and its timed calls may take `BUDGET_SHARE` of the
compile's search budget (options.budget_s for each kernel installed), at least `BUDGET_FLOOR_S`
so a small graph still gets a verdict. Where even the fallback's graph cannot be compiled within
it (estimated by the compile of the graph with the kernels), the verdict is *conservative*: a
kernel stays only if alone it saved at least `ISOLATED_MARGIN` of the fallback's time (so
tentative near ties and kernels without figures go). Where the budget runs out after the first
trial, the leave-one-out variants left are not timed, and the decision stands on what was timed.

Owns: `VerdictPlan` (the trials, in order, and the decision), `Outcome` (the kept set, each
dropped kernel's reason, the figures, the cost; its cache record and log line), the constants.
Must not: time calls (verdict_timing.py) or compile (judged.py, through the backend's callbacks).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from .providers import IsolatedMs
from .verdict_timing import MARGIN, Verdict

Kernels = frozenset[str]

# The verdict's compiles and timed calls: at most this share of the compile's search budget...
BUDGET_SHARE = 0.10
# ...and never less than this (an Inductor compile of a small graph takes 1-5 s).
BUDGET_FLOOR_S = 20.0
# Leave-one-out variants a graph with several kernels times at most.
MAX_LEAVE_OUT = 3
# Unjudged (over budget), a kernel stays only if alone it saved this share of the fallback's
# time: the isolated gains of issue 56's regressions were within 0-25% of the in-context ones.
ISOLATED_MARGIN = 0.10


def verdict_budget_s(budget_s: float, kernels: int) -> float:
    """The seconds one graph's verdict may spend (module docstring)."""
    return max(BUDGET_FLOOR_S, BUDGET_SHARE * budget_s * kernels)


def _doubtful(figures: IsolatedMs | None) -> bool:
    return figures is None or figures.tentative or figures.gain < ISOLATED_MARGIN


def leave_out_order(kernels: Sequence[str], isolated: Mapping[str, IsolatedMs]) -> list[str]:
    """The kernels in the order their leave-one-out variants are tried (module docstring)."""

    def rank(kernel: str) -> tuple[int, float]:
        figures = isolated.get(kernel)
        if _doubtful(figures):
            return 0, -(figures.fallback_ms if figures is not None else 0.0)
        assert figures is not None
        return 1, -(figures.fallback_ms - figures.kernel_ms)

    return sorted(kernels, key=rank)


def conservative(kernels: Sequence[str], isolated: Mapping[str, IsolatedMs]) -> Kernels:
    """The kernels kept without an in-context figure: those alone faster by ISOLATED_MARGIN."""
    return frozenset(k for k in kernels if not _doubtful(isolated.get(k)))


@dataclasses.dataclass(frozen=True)
class Trial:
    """One timed comparison: the `candidate` set of kernels against the `reference` set."""

    candidate: Kernels
    reference: Kernels
    verdict: Verdict


@dataclasses.dataclass(frozen=True)
class Outcome:
    """The verdict on one graph: the kernels `kept` of `kernels`, and why."""

    kernels: tuple[str, ...]
    kept: Kernels
    isolated: Mapping[str, IsolatedMs]
    trials: tuple[Trial, ...] = ()
    cost_s: float = 0.0
    budget_s: float = 0.0
    over_budget: bool = False

    @property
    def first(self) -> Verdict | None:
        """All the kernels against none, where it was timed."""
        return self.trials[0].verdict if self.trials else None

    def effect(self, kernel: str) -> float | None:
        """How much longer the graph took with `kernel` than without it, the others in place
        (0.03: 3% longer), from its leave-one-out trial; None where none timed it."""
        first = self.first
        for t in self.trials[1:]:
            if t.candidate == frozenset(self.kernels) - {kernel} and first is not None:
                with_it = first.ratio if not t.reference else 1.0  # over the same reference
                return with_it / t.verdict.ratio - 1.0
        if len(self.kernels) == 1 and first is not None:
            return first.ratio - 1.0
        return None

    def why_dropped(self, kernel: str) -> str:
        figures = self.isolated.get(kernel)
        alone = "no figures alone" if figures is None else (
            f"alone {figures.kernel_ms:.4g} vs {figures.fallback_ms:.4g} ms"
            + (" (a near tie)" if figures.tentative else f" ({figures.gain:+.1%})")
        )  # fmt: skip
        effect = self.effect(kernel)
        if effect is not None:
            return f"{alone}, in context {effect:+.1%} graph time with it"
        if self.first is None:
            return f"{alone}, under the {ISOLATED_MARGIN:.0%} kept unjudged (over budget)"
        return f"{alone}, in context not timed alone (no timed set with it won)"

    def record(self) -> dict[str, Any]:
        """What the cache keeps (cache/context.py): a later compile installs exactly `kept`."""
        figures = self.first.record() if self.first is not None else {}
        effects = {k: round(e, 4) for k in self.kernels if (e := self.effect(k)) is not None}
        return {
            **figures,
            "keep": bool(self.kept),
            "kept": sorted(self.kept),
            "dropped": {k: self.why_dropped(k) for k in self.kernels if k not in self.kept},
            "effects": effects,
            "cost_s": round(self.cost_s, 3),
            "budget_s": round(self.budget_s, 3),
            "over_budget": self.over_budget,
        }

    def describe(self, label: str) -> str:
        """The verdict's one log line."""
        n = len(self.kernels)
        kept = f"keeps {len(self.kept)} of its {n} kernel(s) {sorted(self.kept)}"
        dropped = [f"{k} ({self.why_dropped(k)})" for k in self.kernels if k not in self.kept]
        text = f"in context, the {label} graph {kept}"
        text += f"; drops {'; '.join(dropped)}" if dropped else ""
        first = self.first
        text += f": {first.describe()}" if first is not None else ": not timed"
        chosen = next((t for t in self.trials[1:] if t.candidate == self.kept), None)
        if chosen is not None:
            text += (
                f"; the kept set {chosen.verdict.with_median:.4f} ms against "
                f"{chosen.verdict.without_median:.4f} ({chosen.verdict.wins} of "
                f"{len(chosen.verdict.with_ms)} pairs)"
            )
        spent = f"the verdict cost {self.cost_s:.1f} s of its {self.budget_s:.1f} s budget"
        return f"{text}; {spent}" + (" (over budget: conservative)" if self.over_budget else "")


class VerdictPlan:
    """The trials of one graph's verdict, in order (module docstring): `next_trial()` the sets
    to time next (None: decided), `tell(verdict)` its figures, `outcome()` the decision."""

    def __init__(
        self,
        kernels: Sequence[str],
        isolated: Mapping[str, IsolatedMs],
        budget_s: float,
        spent_s: float = 0.0,
        leave_outs: Sequence[str] = (),
        tolerance: float | None = None,
    ) -> None:
        self.kernels, self.isolated = tuple(kernels), dict(isolated)
        self.tolerance = tolerance  # objective "energy": its time tolerance (module docstring)
        self.budget_s, self.spent_s = budget_s, spent_s
        self.leave_outs = list(leave_outs)  # kernels whose leave-one-out variant was compiled
        self.every: Kernels = frozenset(kernels)
        self.trials: list[Trial] = []
        self.over_budget = False
        self._queue: list[tuple[Kernels, Kernels]] = [(self.every, frozenset())]

    def next_trial(self) -> tuple[Kernels, Kernels] | None:
        """(candidate set, reference set) to time next, or None when the verdict is made."""
        if self._queue and self.trials and self.spent_s >= self.budget_s:
            self.over_budget, self._queue = True, []  # the rest goes untimed
        return self._queue[0] if self._queue else None

    def margin(self, candidate: Kernels, reference: Kernels) -> float:
        """The margin of the trial of `candidate` against `reference` (module docstring)."""
        changed = candidate ^ reference
        tentative = any((f := self.isolated.get(k)) is not None and f.tentative for k in changed)
        if self.tolerance is None or tentative:
            return MARGIN
        return -self.tolerance if candidate >= reference else self.tolerance

    def tell(self, verdict: Verdict) -> None:
        candidate, reference = self._queue.pop(0)
        self.trials.append(Trial(candidate, reference, verdict))
        self.spent_s += verdict.cost_s
        if len(self.trials) == 1:
            against = self.every if verdict.keep else frozenset()
            self._queue = [(self.every - {k}, against) for k in self.leave_outs]

    def outcome(self) -> Outcome:
        first = self.trials[0].verdict if self.trials else None
        kept = self.every if first is not None and first.keep else frozenset()
        winners = [t for t in self.trials[1:] if t.verdict.keep]
        if winners:
            kept = min(winners, key=lambda t: t.verdict.ratio).candidate
        return Outcome(
            self.kernels,
            kept,
            self.isolated,
            tuple(self.trials),
            self.spent_s,
            self.budget_s,
            self.over_budget,
        )

    def unjudged(self) -> Outcome:
        """The conservative decision, where the budget allows no trial (module docstring)."""
        kept = conservative(self.kernels, self.isolated)
        return Outcome(self.kernels, kept, self.isolated, (), self.spent_s, self.budget_s, True)
