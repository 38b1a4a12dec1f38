"""A warm-up that plans first: the whole step's subgraphs (forward and backward) found before
anything is searched, one search per distinct cache key, in descending estimated gain
(tuner/plan.py), each with its share of the time left, until the deadline's search share.

What the deadline leaves is listed (the report's plan), not silently dropped. A resumed warm-up
goes on with the next best: a key whose search found a kernel is a cache hit, and one whose
fallback stayed fastest is recorded (cache/searched.py), so neither is planned again.
Progress lines go to stderr as `[warmup] ...` (as the bench's `[bench] ...`) unless
options.progress is off.

Owns: `warm_planned` (collect, plan, search in order), `plan_summary`. Must not: collect the
subgraphs itself (offline.py passes `_step_subgraphs`), time steps or decide the in-context
verdicts (incontext.py).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..cache.searched import SearchedKeys
from ..fx_passes import Subgraph
from ..profilers.anchors import anchors_ms
from ..runtime.fallback import FallbackSettings
from ..runtime.relayout import copy_bytes
from ..runtime.timing import time_kernel
from ..tuner.plan import (
    FALLBACK_ATTAINS,
    KERNELS_ATTAIN,
    PlanItem,
    SearchPlan,
    plan_searches,
    planning_ceilings,
    search_budget_s,
)
from .report import Phases
from .rows import WarmupRow, _Recording

log = logging.getLogger("kernelpro.warmup")

Say = Callable[[str], None]

BASIS = (
    f"occurrences x (the fallback's roofline time at {FALLBACK_ATTAINS:.0%} of the roofs, "
    "extern GEMM/conv/attention outputs read back, or on a GPU its library calls' measured "
    "time if longer, - the speed-of-light bound with the layout copies the graph makes "
    "around a kernel, over the share of it kernelpro's kernels reach: "
    + ", ".join(f"{op} {share:.0%}" for op, share in KERNELS_ATTAIN.items())
    + ", the rest 100%)"
)


def progress(on: bool) -> Say:
    """The warm-up's progress lines (stderr), or nothing."""
    if not on:
        return lambda line: None
    return lambda line: print(f"[warmup] {line}", file=sys.stderr, flush=True)


def warm_planned(
    recording: _Recording,
    collect: Callable[[], list[Subgraph]],
    phases: Phases,
    say: Say,
) -> tuple[SearchPlan, list[WarmupRow]]:
    """Collect the step's subgraphs, plan their searches and run them in order until the
    recording's search deadline; returns the plan and its rows (one per distinct key)."""
    finder = recording.finder
    with phases.timing("collect"):
        subgraphs = collect()
        plan = plan_step(finder, subgraphs)
    say(
        f"{plan.occurrences} subgraphs ({len(plan.items())} distinct) in "
        f"{phases['collect']:.1f} s; {len(plan.planned)} to search "
        f"(est. {plan.gain_left_ms(0):.3f} ms a step), {plan.count('cached')} cached, "
        f"{plan.count('below floor')} below the floor of {plan.floor_ms * 1e3:.1f} us a call, "
        f"{plan.count('searched before')} searched before"
    )
    recording.planned = True
    with phases.timing("search"):
        run_plan(plan, finder, recording, recording.search_until, say)
    symbolic = [
        WarmupRow(sg.graph, sg.pattern, "-", "symbolic", 0.0, recording.shape)
        for sg in subgraphs
        if sg.symbolic and not sg.dynamic
    ]
    return plan, [*(_row(item, recording.shape) for item in plan.items()), *symbolic]


def plan_step(finder: Any, subgraphs: Sequence[Subgraph]) -> SearchPlan:
    """The plan of the step's subgraphs against what the finder's cache already knows."""
    keys: dict[str, Any] = {}
    searched = SearchedKeys(finder.cache.layout.searched)

    def digest_of(sg: Subgraph) -> str:
        key = finder.cache.key_for(sg.key)
        keys.setdefault(key.digest, key)
        return str(key.digest)

    def known(digest: str) -> str | None:
        if finder.cache_op("read", lambda: finder.cache.lookup(keys[digest])) is not None:
            return "cached"
        return "searched before" if digest in searched else None

    patterns = finder.options.search_patterns
    inductor = finder.options.fallback == "inductor"  # an eager graph makes no copies

    def copies(sg: Subgraph) -> int:
        return copy_bytes(sg.input_meta, sg.output_meta, FallbackSettings.of(sg)) if inductor else 0

    return plan_searches(
        subgraphs,
        digest_of,
        planning_ceilings(_measured_ceilings(finder, subgraphs)),
        finder.options.min_gain_ms(),
        known,
        lambda sg: not patterns or sg.pattern in patterns,
        copies,
        library_time,
    )


def anchor_timer(
    device: torch.device, budget_s: float = 0.02
) -> Callable[[Callable[[], object]], float]:
    """A library call's median ms by the runtime's own timing (runtime/timing.py: warm-up
    calls, L2 flushed between timed calls, CUDA-graph replays for short ones), on a small
    budget: the plan ranks keys by it, no kernel is decided by it."""

    def time_ms(call: Callable[[], object]) -> float:
        with torch.no_grad(), torch.cuda.device(device):
            return time_kernel(call, [()], device, budget_s=budget_s).median_ms

    return time_ms


def library_time(sg: Subgraph) -> float | None:
    """`sg`'s library calls' time a call, measured on its GPU (None off the GPU, or when one
    cannot run alone: then the roofline's estimate stands, and the log says why)."""
    if sg.device.type != "cuda":
        return None
    try:
        return anchors_ms(sg, anchor_timer(sg.device))
    except Exception as e:  # an anchor that cannot run on random inputs (attention's seeds)
        log.warning("plan: the library calls of %s %s not timed: %s", sg.graph, sg.pattern, e)
        return None
    finally:
        torch.cuda.empty_cache()


def _measured_ceilings(finder: Any, subgraphs: Sequence[Subgraph]) -> Any:
    """The device's measured ceilings (the searcher's, cached in the cache dir), or None."""
    measure = getattr(finder.searcher, "ceilings", None)
    on_gpu = next((sg for sg in subgraphs if sg.device.type == "cuda"), None)
    if measure is None or on_gpu is None:
        return None
    try:
        return measure(on_gpu)
    except Exception as e:  # the plan still orders with the datasheet's roofs
        log.warning("cannot measure the device's ceilings (%s); planning with the datasheet's", e)
        return None


def run_plan(
    plan: SearchPlan, finder: Any, recording: _Recording, until: float | None, say: Say
) -> None:
    """Search the planned keys in order, each with its budget (tuner/plan.py), until `until`
    (time.perf_counter()); the rest are marked "not reached". A kernel found is held for the
    in-context check (rows.py); a key whose fallback stayed fastest is recorded as searched."""
    budgets = getattr(finder.searcher, "budgets", None)
    searched = SearchedKeys(finder.cache.layout.searched)
    finder.prepare([item.subgraph for item in plan.planned])  # CUTLASS builds, best first
    finder.searching = True
    for i, item in enumerate(plan.planned):
        left = None if until is None else until - time.perf_counter()
        budget = search_budget_s(item.gain_ms, plan.gain_left_ms(i), left, finder.options.budget_s)
        if budget is None:
            _out_of_time(plan.planned[i:], say)
            break
        item.budget_s = budget
        if budgets is not None:
            budgets[item.subgraph.key.digest] = budget
        t0 = time.perf_counter()
        artifact = finder.resolve(item.subgraph)
        item.seconds = time.perf_counter() - t0
        skipped = getattr(finder.searcher, "skipped", None)
        if artifact is not None:
            item.status = "kernel"
            recording.hold(item.digest, item.subgraph)
        elif skipped or item.digest not in finder.searched:
            item.status, item.why = "skipped", skipped or "not searched (see the log)"
        else:
            item.status = "fallback"
            searched.add(item.digest, item.subgraph.pattern, budget)
        rest = "" if until is None else f"; {until - time.perf_counter():.0f} s left"
        say(
            f"search {i + 1}/{len(plan.planned)} {item.subgraph.pattern} x{item.count} "
            f"(est. {item.gain_ms:.3f} ms a step, budget {budget:.0f} s): {item.status} "
            f"in {item.seconds:.1f} s{rest}"
        )
    finder.searching = False  # a compile after the plan serves hits and searches nothing


def _out_of_time(left: list[PlanItem], say: Say) -> None:
    for item in left:
        item.status = "not reached"
    gain = sum(item.gain_ms for item in left)
    log.warning(
        "the search's share of the deadline is spent; the subgraphs left keep the fallback "
        "(a later warm-up searches them), the rest of the time is the in-context check's"
    )
    say(
        f"deadline: {len(left)} planned search(es) not reached (est. {gain:.3f} ms a step); "
        "a later warm-up resumes with them"
    )


NOTES = {
    "kernel": "found",
    "fallback": "searched: the fallback stays fastest",
    "cached": "cached",
    "searched before": "searched before: the fallback stayed fastest",
    "not reached": "not reached by the deadline",
    "not selected": "not in search_patterns",
}


def _row(item: PlanItem, shape: str) -> WarmupRow:
    sg = item.subgraph
    result = "kernel" if item.status in ("kernel", "cached") else "fallback"
    note = NOTES.get(item.status, item.status)
    if item.why:
        note = f"{note}: {item.why}"
    if item.status in ("planned", "kernel", "fallback", "not reached"):
        note = f"{note} (est. {item.gain_ms:.3f} ms a step)"
    return WarmupRow(
        sg.graph, sg.pattern, sg.key.short(), result, item.seconds, shape, item.count, note
    )


def plan_summary(plans: Sequence[SearchPlan]) -> dict[str, Any]:
    """The report's plan: the counts over the plans (one per shape), the floor, the basis of
    the estimate and the keys the deadline left, best first."""
    if not plans:
        return {}
    summary: dict[str, Any] = {}
    for plan in plans:
        for name, n in plan.counts().items():
            summary[name] = summary.get(name, 0) + n
    left = [i for p in plans for i in p.planned if i.status == "not reached"]
    summary.update(
        floor_us=plans[0].floor_ms * 1e3,
        basis=BASIS,
        not_reached_items=[
            {
                "pattern": i.subgraph.pattern,
                "key": i.subgraph.key.short(),
                "count": i.count,
                "gain_ms": round(i.gain_ms, 4),
            }
            for i in sorted(left, key=lambda i: -i.gain_ms)
        ],
    )
    return summary
