"""The in-context verdict on one compiled graph: which of kernelpro's kernels it keeps.

A kernel wins its search against the fallback compiling its subgraph alone, in a worker. Inside
the graph the fallback runs otherwise: Inductor fuses the subgraph's neighbours into it, picks
channels-last convolutions and its own cuDNN algorithms, and the kernel meets other cache state.
On 31 KernelBench problems on an H100 (search on a miss, 10 s a subgraph), three kernels that
had won alone made their problem slower than Inductor: a convolution's ATen call 0.78x, two
GroupNorm kernels (1.33x alone) 0.96x and 0.97x.

So a compile that installs kernels compiles the graph with them, the fallback's own graph, and
(several kernels, budget allowing) variants that leave one kernel out each; the graph's first
calls take turns between two of them at a time (verdict_timing.py: warm-up calls, A-B/B-A
pairs timed with device events, kept only where faster beyond noise), trial after trial as
verdict_plan.py orders them, within its budget. Then the chosen variant runs from then on and
the others are released. One INFO line says what was kept and dropped and why (each dropped
kernel's isolated gain and in-context effect, the figures, the verdict's cost). The verdict goes
to the cache (cache/context.py) under `graph_key` with the kept kernel ids, so a later compile
of the same graph with the same kernels compiles exactly those, untimed.

Owns: `Judging` (a known verdict, or the compiles and the judgement of this one), `JudgedGraph`
(the trials on the graph's calls), `graph_key`, `judge`, `symbolic`, `default_clock`;
re-exports the timing's names and `compile_beside` (beside.py).
Must not: compile graphs itself (the backend's callbacks do) or choose kernels (the provider).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import torch

from .beside import compile_beside
from .providers import IsolatedMs
from .verdict_plan import (
    MAX_LEAVE_OUT,
    Kernels,
    Outcome,
    VerdictPlan,
    leave_out_order,
    verdict_budget_s,
)
from .verdict_timing import (
    KEEP_SHARE,
    MARGIN,
    ROUNDS,
    WARMUP,
    Clock,
    DeviceClock,
    HostClock,
    Trial,
    Verdict,
    decide,
)

__all__ = [
    "KEEP_SHARE", "MARGIN", "ROUNDS", "WARMUP", "Clock", "DeviceClock", "HostClock", "Judging",
    "JudgedGraph", "Verdict", "compile_beside", "decide", "default_clock", "graph_key", "judge",
    "symbolic",
]  # fmt: skip

log = logging.getLogger("kernelpro")

Compiled = Callable[..., Any]


class JudgedGraph:
    """A compiled graph called as AOTAutograd calls a compiler's result (one list of inputs,
    `_boxed_call`), served by the `variants` (kernel set -> compiled graph) the `plan`'s trials
    time, then by the one its outcome keeps. `on_outcome` gets the outcome once, after the
    others are released."""

    def __init__(
        self,
        variants: Mapping[Kernels, Compiled],
        plan: VerdictPlan,
        clock: Clock,
        on_outcome: Callable[[Outcome], None],
        label: str = "graph",
    ) -> None:
        # An instance attribute: wrappers (torch._dynamo.disable around a backward) copy the
        # instance's __dict__, not its class's.
        self._boxed_call = True
        self._variants = dict(variants)
        self._plan, self._clock, self._on_outcome, self._label = plan, clock, on_outcome, label
        self._chosen: Compiled | None = None
        self._trial = self._next()

    @property
    def settled(self) -> bool:
        return self._chosen is not None

    def __call__(self, args: list[Any]) -> Any:
        if self._chosen is not None:
            return self._chosen(args)
        trial = self._trial
        assert trial is not None
        out = trial(args)
        if trial.verdict is not None:
            self._plan.tell(trial.verdict)
            self._trial = self._next()
        return out

    def _next(self) -> Trial | None:
        sets = self._plan.next_trial()
        if sets is None:
            self._settle(self._plan.outcome())
            return None
        candidate, reference = sets
        margin = self._plan.margin(candidate, reference)
        return Trial(self._variants[candidate], self._variants[reference], self._clock, margin)

    def _settle(self, outcome: Outcome) -> None:
        self._chosen = self._variants[outcome.kept]
        self._variants = {}  # the others' compiled code and buffers go
        log.info(outcome.describe(self._label))
        try:
            self._on_outcome(outcome)
        except Exception as e:  # recording it is a nicety; the choice above is made
            log.warning("could not record the %s graph's verdict (%s)", self._label, e)


class VerdictStore(Protocol):
    """Where verdicts outlive the process (cache/context.py's ContextVerdicts)."""

    def judged(self, key: str) -> dict[str, Any] | None: ...

    def set_judged(self, key: str, record: dict[str, Any]) -> None: ...


def graph_key(
    code: str, inputs: Sequence[Any], kernels: Sequence[str], tolerance: float | None = None
) -> str:
    """The identity of one aten graph with one set of kernels, across processes: its code as
    the fallback would compile it, its inputs' shapes, strides, dtypes and devices, the GPU
    model it runs on (a cache directory shared by two machines), and the kernels' ids (a new
    kernel for one of its subgraphs is judged again); and objective "energy"'s `tolerance`,
    whose verdicts are not the time rule's (a cache shared by both objectives)."""
    metas = [
        (tuple(map(str, x.shape)), tuple(map(str, x.stride())), str(x.dtype), x.device.type)
        if isinstance(x, torch.Tensor)
        else type(x).__name__
        for x in inputs
    ]
    cuda = [x.device for x in inputs if isinstance(x, torch.Tensor) and x.device.type == "cuda"]
    gpu = torch.cuda.get_device_name(cuda[0]) if cuda else ""
    text = f"{code}\n{metas}\n{gpu}\n{sorted(kernels)}"
    if tolerance is not None:
        text += f"\nenergy, within {tolerance}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class Judging:
    """The in-context verdict for one graph with `kernels` installed: what an earlier compile
    recorded under `key`, or the compiles and the judgement of this one (`compile`)."""

    def __init__(
        self,
        key: str,
        kernels: Sequence[str],
        store: VerdictStore | None,
        clock: Clock,
        label: str,
        on_outcome: Callable[[Outcome], None] | None = None,
        isolated: Mapping[str, IsolatedMs] | None = None,
        budget_s: float = 0.0,
        tolerance: float | None = None,
    ) -> None:
        self.key, self.kernels, self._store = key, list(kernels), store
        self.tolerance = tolerance  # objective "energy" (verdict_plan.py)
        self._clock, self._label, self._on_outcome = clock, label, on_outcome
        self.isolated, self.budget_s = dict(isolated or {}), budget_s
        self.every: Kernels = frozenset(kernels)
        self.known: dict[str, Any] | None = None
        if store is not None:
            try:
                self.known = store.judged(key)
            except OSError as e:  # a bad cache must not stop a compile: judge again
                log.warning("in-context verdicts unreadable (%s); judging again", e)
        over = self.known is not None and self.known.get("over_budget")
        if over and float((self.known or {}).get("budget_s", 0.0)) < budget_s:
            self.known = None  # decided over a smaller budget: judge again

    def known_kept(self) -> Kernels | None:
        """The kernels an earlier verdict kept (a record from before per-kernel verdicts: all
        or none), or None where there is none."""
        if self.known is None:
            return None
        kept = self.known.get("kept")
        if kept is None:
            kept = self.kernels if self.known.get("keep", True) else []
        return frozenset(kept) & self.every

    def compile(
        self, compile_all: Callable[[], Compiled], compile_variant: Callable[[Kernels], Compiled]
    ) -> Compiled:
        """The graph as an earlier verdict left it (`compile_all()` with every kernel, or
        `compile_variant(kept)`), else a JudgedGraph between the variants compiled now."""
        kept = self.known_kept()
        if kept is not None:
            if kept != self.every:
                log.info(
                    "the %s graph runs with %d of its %d kernel(s), as judged in "
                    "context %s: %s", self._label, len(kept), len(self.kernels),
                    (self.known or {}).get("time", "before"), (self.known or {}).get("dropped"),
                )  # fmt: skip
            return compile_all() if kept == self.every else compile_variant(kept)
        started = time.perf_counter()
        variants = {self.every: compile_all()}
        estimate = time.perf_counter() - started  # what compiling one more variant may cost
        plan = VerdictPlan(self.kernels, self.isolated, self.budget_s, tolerance=self.tolerance)
        if estimate > self.budget_s:
            why = f"over budget (one compile took {estimate:.1f} s of its {self.budget_s:.1f} s)"
            return self._unjudged(plan, variants, compile_variant, why)
        spent = self._add(variants, frozenset(), compile_variant)
        if spent is None:  # nothing to time against: not recorded, a later compile tries again
            why = "not judged (the fallback's own graph did not compile)"
            return self._unjudged(plan, variants, compile_variant, why, record=False)
        order = leave_out_order(self.kernels, self.isolated) if len(self.kernels) > 1 else []
        for kernel in order[:MAX_LEAVE_OUT]:
            if spent + estimate > self.budget_s:
                log.info(
                    "the %s graph's verdict times no more leave-one-out variants: "
                    "%.1f s of its %.1f s budget spent", self._label, spent, self.budget_s,
                )  # fmt: skip
                plan.over_budget = True
                break
            took = self._add(variants, self.every - {kernel}, compile_variant)
            if took is not None:
                plan.leave_outs.append(kernel)
                spent, estimate = spent + took, took
        plan.spent_s = spent
        return JudgedGraph(variants, plan, self._clock, self._record, self._label)

    def _add(
        self,
        variants: dict[Kernels, Compiled],
        kept: Kernels,
        compile_variant: Callable[[Kernels], Compiled],
    ) -> float | None:
        """Compile the variant with `kept` beside the first into `variants`: the seconds it
        took, or None when it failed (logged)."""
        started = time.perf_counter()
        try:
            variants[kept] = compile_beside(lambda: compile_variant(kept))
        except Exception as e:  # a bug to report; the graph with the kernels is proved
            what = "without its kernels" if not kept else f"with {len(kept)} of its kernels"
            log.warning(
                "the %s graph could not be compiled %s beside the graph with them "
                "(%s: %s)", self._label, what, type(e).__name__, str(e)[:300],
            )  # fmt: skip
            return None
        return time.perf_counter() - started

    def _unjudged(
        self,
        plan: VerdictPlan,
        variants: dict[Kernels, Compiled],
        compile_variant: Callable[[Kernels], Compiled],
        why: str,
        record: bool = True,
    ) -> Compiled:
        """No trial can be made: the conservative decision (verdict_plan.py), recorded (over
        budget) with the budget it was made under, so a larger one judges again."""
        log.info("the %s graph's in-context verdict is %s: deciding on the "
                 "isolated figures", self._label, why)  # fmt: skip
        outcome = plan.unjudged()
        compiled = variants.get(outcome.kept)
        if compiled is None:
            try:
                compiled = compile_beside(lambda: compile_variant(outcome.kept))
            except Exception as e:  # a bug to report; the graph with the kernels is proved
                log.warning("the %s graph's conservative variant did not compile "
                            "(%s); running it with all its kernels", self._label, e)  # fmt: skip
                return variants[self.every]
        log.info(outcome.describe(self._label))
        if record:
            self._record(outcome)
        elif self._on_outcome is not None:
            self._on_outcome(outcome)
        return compiled

    def _record(self, outcome: Outcome) -> None:
        if self._on_outcome is not None:
            self._on_outcome(outcome)
        if self._store is not None:
            record = {**outcome.record(), "graph": self._label, "kernels": self.kernels}
            self._store.set_judged(self.key, record)


def symbolic(inputs: Sequence[Any]) -> bool:
    """Whether a graph's inputs have symbolic sizes: its calls then come at different sizes, and
    two calls' times say nothing of the two variants (each size's kernel was proved and timed
    at that size behind its shape dispatcher, rewrite/dispatch.py)."""
    return any(
        isinstance(x, torch.SymInt)
        or (isinstance(x, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in x.shape))
        for x in inputs
    )


def default_clock(inputs: Sequence[Any]) -> Clock | None:
    """Device events for a graph with CUDA inputs; None (no judgement) for any other: kernels
    are only installed on CUDA devices."""
    cuda = any(isinstance(x, torch.Tensor) and x.device.type == "cuda" for x in inputs)
    return DeviceClock() if cuda else None


def judge(
    report: Any,
    code: str,
    inputs: Sequence[Any],
    store: VerdictStore | None,
    clock: Clock,
    search_budget_s: float = 0.0,
    tolerance: float | None = None,
) -> Judging:
    """The judgement of one rewritten graph (`report`: rewrite/graph.py's RewriteReport, whose
    `in_context`, `verdict` and `dropped` it keeps current), keyed by the graph's code as the
    fallback would compile it, its inputs and its kernels; its budget a share of the search
    budget (`search_budget_s` a subgraph, verdict_plan.py); under objective "energy" the rule
    that energy's time `tolerance` sets (verdict_plan.py)."""

    def note(kept: Kernels, record: dict[str, Any] | None) -> None:
        report.in_context = (
            "kept" if kept == frozenset(report.replaced) else "partial" if kept else "dropped"
        )
        report.dropped = [k for k in report.replaced if k not in kept]
        report.verdict = record

    key = graph_key(code, inputs, report.replaced, tolerance)
    budget = verdict_budget_s(search_budget_s, len(report.replaced))
    judging = Judging(
        key, report.replaced, store, clock, report.graph,
        lambda outcome: note(outcome.kept, outcome.record()), report.isolated, budget, tolerance,
    )  # fmt: skip
    kept = judging.known_kept()
    if kept is None:
        report.in_context = "judging"
    else:
        note(kept, judging.known)
    return judging
