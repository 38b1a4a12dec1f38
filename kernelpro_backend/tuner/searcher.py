"""Searching one subgraph on a cache miss: lowering, memory plan, pool lease, search, winner.

Owns: `SubgraphSearcher` (subgraph -> proved winner as a `KernelArtifact`, or None when the
fallback stays fastest, no template covers the subgraph, or it cannot fit on the GPU),
`make_proposer` (the proposer `options.proposer` names) and `power_header` (the power cap the
search log records); the winner becomes an artifact in outcome.py (`outcome_artifact`, also
importable from here).
Must not: read or write the cache (finder.py does), or compile, validate and time candidates
itself (the pool's workers do, through measurer.py).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..cache.artifact import KernelArtifact
from ..codegen import Unsupported
from ..fx_passes import Subgraph
from ..lowering import lower
from ..options import Options
from ..paths import CacheLayout
from ..profilers.ceilings import Ceilings
from ..profilers.energy import NvmlMeter, power_cap
from ..profilers.speed_of_light import SpeedOfLight
from ..runtime.candidate import BaselineCandidate
from ..runtime.cuda.host import use_library_dir
from ..runtime.job import Job
from ..runtime.memory import Footprint, MemoryPlan, gpu_free_bytes, plan_memory
from ..runtime.shared_pool import lease_pool, prestart_pool
from ..runtime.worker_setup import WorkerSetup
from ..search import Budget, SearchMemory, SearchOutcome, codegen_space, optimize
from .cutlass_builds import CutlassBuilds
from .eager import eager_artifact
from .measurer import PoolMeasurer
from .outcome import eager_or_none, outcome_artifact

if TYPE_CHECKING:
    from ..search import Proposer

_CUTLASS_KINDS = ("gemm", "conv")  # the subgraphs a CUTLASS library may compute

log = logging.getLogger("kernelpro")


# A memory-bound search goes on until its best reaches this fraction of the DRAM bound (or its
# budget ends), instead of stopping on a plateau: published row kernels (QuACK) hold ~90% of
# H100 DRAM bandwidth at every row length. Below BANDWIDTH_FLOOR_MS of DRAM time, launch latency
# (a few us) and the tail keep any kernel far from the bound: the plateau rule applies there.
BANDWIDTH_TARGET = 0.9
BANDWIDTH_FLOOR_MS = 0.02


def make_proposer(options: Options, environ: Mapping[str, str] | None = None) -> Proposer:
    """The proposer `options.proposer` names. "llm" checks its package and endpoint settings
    here, when the searcher is built, so a missing one fails once with what to set rather than
    inside every search; nodes its answers leave without children get the rules' children
    (logged)."""
    from ..search import LLMProposer, RuleProposer

    if options.proposer == "llm":
        return LLMProposer.from_environ(
            options.llm_model,
            environ,
            client_options={"timeout_s": options.llm_timeout_s},
            fallback=RuleProposer(objective=options.objective),
        )
    return RuleProposer(objective=options.objective)


class SubgraphSearcher:
    """On a cache miss: lower the subgraph, plan its memory, search it, return the winner as
    an artifact. `skipped` holds why the last subgraph was not searched (for the manifest)."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.proposer = make_proposer(options)
        self.skipped: str | None = None
        # The last search's outcome (None: not searched): its `under(objective)` and
        # `outcome_artifact` give the kernel another objective's rule keeps from the same trials.
        self.outcome: SearchOutcome | None = None
        # A warm-up's plan (tuner/plan.py): seconds per search by SubgraphKey digest, in place
        # of options.budget_s (more for the subgraphs estimated to gain most).
        self.budgets: dict[str, float] = {}
        self._ceilings: Ceilings | None = None
        self.layout = CacheLayout.of(options.cache_dir)  # logs, memory, ceilings, cubins
        self.cutlass = CutlassBuilds(self.layout.cubin_root, options.cutlass_jobs)
        use_library_dir(self.layout.cubin_root)  # a CUTLASS winner runs here from that cache

    def ceilings(self, subgraph: Subgraph) -> Ceilings | None:
        """The device's measured ceilings (cached in the cache dir); None off the GPU."""
        if subgraph.device.type != "cuda":
            return None
        if self._ceilings is None:
            self._ceilings = Ceilings.load_or_measure("cuda", self.layout.root)
        return self._ceilings

    def bandwidth_target(self, subgraph: Subgraph) -> float | None:
        """BANDWIDTH_TARGET for a memory-bound subgraph big enough for bandwidth to decide
        (its DRAM bound at least BANDWIDTH_FLOOR_MS; below it launch latency does), else None."""
        ceilings = self.ceilings(subgraph)
        if ceilings is None:
            return None
        bound = SpeedOfLight.memory_bound_ms(
            SpeedOfLight.work(subgraph), ceilings, subgraph.precision
        )
        return BANDWIDTH_TARGET if bound is not None and bound >= BANDWIDTH_FLOOR_MS else None

    def _options(self, subgraph: Subgraph) -> Options:
        planned = self.budgets.get(subgraph.key.digest)
        options = self.options
        if planned is not None:
            options = dataclasses.replace(options, budget_s=planned)
        return _options_for(options, subgraph)

    def _pool_args(self) -> tuple[int, float, float]:
        return self.options.workers, self.job_timeout_s, self.options.pool_idle_s

    def _pool_settings(self) -> dict[str, Any]:
        return {
            "setup": WorkerSetup(self.layout, self.options.nvcc_timeout_s),
            "start_timeout_s": self.options.worker_start_timeout_s,
        }

    def queue_builds(self, subgraphs: Sequence[Subgraph]) -> None:
        """Queue the CUTLASS libraries these GEMMs' and convolutions' searches could use
        (tuner/cutlass_builds.py), as early as a graph's subgraphs are known: they build while
        other subgraphs search."""
        for subgraph in subgraphs:
            if subgraph.kind in _CUTLASS_KINDS and subgraph.device.type == "cuda":
                try:
                    self.cutlass.start(lower(subgraph))
                except Unsupported:
                    continue
                except Exception:  # called outside any search's guard: never break a compile
                    log.exception("queueing CUTLASS builds for %s failed", subgraph.pattern)

    def _await_builds(self, subgraph: Subgraph, budget_s: float) -> None:
        """Queue this GEMM's or convolution's CUTLASS builds, and wait up to two search budgets
        for those in flight: the search proposes only built ones, and one build serves every
        later shape of its epilogue (this run's and the next's)."""
        if subgraph.kind not in _CUTLASS_KINDS or subgraph.device.type != "cuda":
            return
        try:
            seed = lower(subgraph)
        except Unsupported:
            return
        self.cutlass.start(seed)
        if self.cutlass.building(seed):
            log.info(
                "%s waits up to %.0f s for its CUTLASS libraries",
                subgraph.pattern,
                2 * budget_s,
            )
            self.cutlass.wait(2 * budget_s, seed)

    def prestart(self) -> None:
        """Start the worker pool the searches will lease, without waiting for it (a warm-up
        calls this before tracing the model, so the ~15 s start overlaps the compile)."""
        prestart_pool(*self._pool_args(), **self._pool_settings())

    @property
    def job_timeout_s(self) -> float:
        ncu = self.options.ncu_timeout_s if "ncu" in self.options.search_tools else 0.0
        return self.options.job_timeout_s + ncu

    def _selected(self, subgraph: Subgraph) -> bool:
        selected = self.options.search_patterns
        if selected and subgraph.pattern not in selected:
            log.info(
                "%s %s is not in search_patterns (%s): fallback",
                subgraph.graph,
                subgraph.pattern,
                ", ".join(selected),
            )
            return False
        return True

    @staticmethod
    def _has_template(subgraph: Subgraph) -> bool:
        try:
            lower(subgraph)
        except Unsupported as e:
            log.info(
                "no template for %s subgraph (%s): timing eager against the fallback only",
                subgraph.pattern,
                e,
            )
            return False
        return True

    def _eager_only(self, pool: Any, subgraph: Subgraph) -> KernelArtifact | None:
        """No template: the subgraph's candidates are its baselines; eager wins if it beats
        Inductor clearly (tuner/eager.py)."""
        job = Job.from_subgraph(subgraph, BaselineCandidate("eager"), ceilings=None)
        results = pool.evaluate_many(job.for_fallback(self.options.fallback).baselines())
        baselines = dict(zip(("eager", "inductor"), results, strict=True))
        artifact = eager_artifact(baselines, self.options)
        return eager_or_none(artifact, subgraph, baselines, self.options)

    def plan(self, subgraph: Subgraph) -> MemoryPlan:
        """How many of the subgraph's evaluations fit on its GPU at once (off the GPU: all)."""
        footprint = Footprint.of(subgraph.input_meta, subgraph.output_meta)
        if subgraph.device.type != "cuda":
            return MemoryPlan(self.options.workers, 0, footprint)
        return plan_memory(footprint, gpu_free_bytes(subgraph.device), self.options.workers)

    def __call__(self, subgraph: Subgraph) -> KernelArtifact | None:
        self.skipped, self.outcome = None, None
        if not self._selected(subgraph):
            return None
        templated = self._has_template(subgraph)
        self.layout.logs.mkdir(parents=True, exist_ok=True)
        log_path = str(self.layout.logs / f"{subgraph.key.digest[:16]}.jsonl")
        self._await_builds(subgraph, self._options(subgraph).budget_s)
        leased = time.perf_counter()
        with lease_pool(*self._pool_args(), **self._pool_settings()) as pool:
            fixed = {
                "pool_start": round(pool.start_s or 0.0, 3),
                "lease": round(time.perf_counter() - leased, 3),
            }
            # Planned with the pool up: its idle workers' CUDA contexts are not free memory.
            plan = self.plan(subgraph)
            if plan.concurrent == 0:
                self.skipped = plan.message
                log.warning("%s %s %s", subgraph.graph, subgraph.pattern, plan.message)
                return None
            if not plan.exact:
                log.warning("%s %s %s", subgraph.graph, subgraph.pattern, plan.message)
            if not templated:
                return self._eager_only(pool, subgraph)
            options = self._options(subgraph)
            measurer = PoolMeasurer(
                options, pool, subgraph, self.ceilings(subgraph), plan.concurrent, plan.exact
            )
            fixed["prepare"] = round(time.perf_counter() - leased - fixed["lease"], 3)
            outcome = optimize(
                subgraph,
                space=codegen_space(self.cutlass.ready),  # type: ignore[arg-type]
                measurer=measurer,
                proposer=self.proposer,
                budget=Budget.from_options(
                    options, plan.concurrent, self.bandwidth_target(subgraph)
                ),
                memory=SearchMemory(self.layout.search_memory),
                log_path=log_path,
                progress=self.options.progress,
                objective=self.options.objective,
                # An instance of a symbolic subgraph always runs behind kernelpro::dispatch.
                min_gain_ms=options.op_min_gain_ms() if subgraph.family else options.min_gain_ms(),
                batch_size=plan.concurrent,
                fixed_s=fixed,
                header=power_header(str(subgraph.device)),
            )
        self.outcome = outcome
        return outcome_artifact(outcome, subgraph, log_path, self.layout.cubin_root, self.options)


@functools.cache
def power_header(device: str) -> dict[str, Any]:
    """The device's enforced power limit beside its default, for the search log's start event
    (read, never set; once per process); {} off CUDA or without NVML."""
    dev = torch.device(device)
    cap = power_cap(NvmlMeter.open(dev.index or 0)) if dev.type == "cuda" else None
    return {"power_cap": cap.to_dict()} if cap is not None else {}


# The share of the budget and trials a search gets at a new size of a symbolic subgraph whose
# other sizes were searched: it starts from their winners (Subgraph.hints), so it refines more
# than it explores, and a loop meeting many sizes at run time does not search each in full.
HINTED_BUDGET = 0.25


def _options_for(options: Options, subgraph: Subgraph) -> Options:
    if not subgraph.hints:
        return options
    trials = max(len(subgraph.hints) + 2, int(options.max_trials * HINTED_BUDGET))
    if subgraph.hints_only:  # a proof of the hints at this size: they are the only trials
        trials = len(subgraph.hints)
    return dataclasses.replace(
        options, budget_s=options.budget_s * HINTED_BUDGET, max_trials=trials
    )


def release_gpu_memory() -> None:
    """After a warm-up: shut the pool down so no worker holds GPU memory, and return the
    caller's cached blocks."""
    from ..runtime.shared_pool import release_pool

    release_pool()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
