"""The composition root: cache, search, evaluator and profilers assembled into the backend's
kernel provider.

Owns: `default_provider(options)`; the measurer that evaluates candidates in the isolated worker
pool, asking each worker for the two-stage feedback (roofline, then `options.search_tools`;
ncu only for candidates that beat the subgraph's best so far); the proposer `options.proposer`
names; the searcher that runs `search.optimize` on a cache miss and turns its winner into a
`KernelArtifact`; the loader that turns an artifact back into a kernel.
Must not: hold search, codegen, validation or cache logic of its own - it only connects them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import tempfile
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .fx_passes import Subgraph
from .options import Options
from .providers import CallableKernel, Kernel, KernelProvider, NullProvider
from .runtime.result import EvalResult

if TYPE_CHECKING:
    from .search import Proposer

log = logging.getLogger("kernelpro")


def load_artifact(artifact: Any) -> Kernel:
    """A cached kernel as a callable, from exactly what was proved and timed. Spec-built Triton
    kernels run their stored source (never a re-rendering by templates that may have changed
    since; traceable, so Inductor can inline them); free-form Triton source is imported; CUDA
    kernels load their stored cubin through the driver API. No nvcc is needed."""
    digest = hashlib.sha256(artifact.source.encode()).hexdigest()[:12]
    if artifact.language == "cuda":
        from .runtime.cuda_driver import load_cubin

        if artifact.binary is None:
            raise ValueError(
                "cached cuda kernel has no cubin; `kernelpro cache verify` drops entries "
                "that do not load, and a new search stores one with its cubin"
            )
        arch = artifact.launch.get("arch")
        cuda_kernel = load_cubin(artifact.source, artifact.entry, artifact.binary, arch)
        return CallableKernel(f"cuda-{artifact.entry}-{digest}", cuda_kernel)
    if artifact.spec_json is None and artifact.language == "triton":
        from .runtime.candidate import SourceCandidate, load_kernel

        candidate = SourceCandidate("triton", artifact.source, artifact.entry)
        workdir = Path(tempfile.mkdtemp(prefix="kernelpro-artifact-"))
        fn = load_kernel(candidate, torch.nn.Identity(), workdir)
        return CallableKernel(f"triton-{artifact.entry}-{digest}", fn)
    if artifact.spec_json is None:
        raise ValueError(f"cached {artifact.language} kernel has no KernelSpec and no loader")
    from .codegen import KernelSpec, RenderedKernel, build

    rendered = RenderedKernel(artifact.language, artifact.source, artifact.entry)
    return build(KernelSpec.from_json(artifact.spec_json), rendered)


JOB_TIMEOUT_S = 120.0  # compile + validate + time one candidate, stage-2 ptxas/sass included
NCU_TIMEOUT_S = 240.0  # more per job when ncu may run: ~20 s typical, retried on old ncu builds


class PoolMeasurer:
    """Evaluates candidates in the worker pool, where each OK candidate gets its roofline and
    stage-2 findings (profilers/feedback.py); remembers each subgraph's best time so that ncu
    profiles only candidates that beat it."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self._pool: Any = None
        self._ceilings: Any = None
        self._best_ms: dict[str, float] = {}  # subgraph key digest -> fastest OK candidate

    @property
    def pool(self) -> Any:
        if self._pool is None:
            from .runtime import WorkerPool

            timeout = JOB_TIMEOUT_S + (NCU_TIMEOUT_S if "ncu" in self.options.search_tools else 0)
            self._pool = WorkerPool(workers=self.options.workers, timeout_s=timeout)
        return self._pool

    @property
    def ceilings(self) -> Any:
        if self._ceilings is None:
            from .profilers.ceilings import Ceilings

            self._ceilings = Ceilings.load_or_measure("cuda", _cache_dir(self.options))
        return self._ceilings

    def _job(self, subgraph: Subgraph, candidate: object, feedback: Any = None) -> Any:
        from .runtime import Job

        return Job.from_subgraph(
            subgraph,
            candidate,
            measure_energy=self.options.objective == "energy",
            ceilings=self.ceilings,
            feedback=feedback,
        )

    def _work_and_roofs(self, subgraph: Subgraph) -> tuple[Any, Any]:
        from .profilers.feedback import subgraph_roofs
        from .profilers.speed_of_light import SpeedOfLight

        work = SpeedOfLight.work(subgraph)
        return work, subgraph_roofs(work, self.ceilings, subgraph.precision)

    def feedback_plan(self, subgraph: Subgraph) -> Any:
        """What each worker runs after timing a candidate of `subgraph`: the roofline, then the
        allowed stage-2 tools; ncu only below the best time so far (none yet: no limit)."""
        from .profilers.feedback import FeedbackPlan

        return FeedbackPlan(
            roofs=self._work_and_roofs(subgraph)[1],
            tools=tuple(self.options.search_tools),
            ncu_below_ms=self._best_ms.get(_digest(subgraph)),
        )

    def measure(self, subgraph: Subgraph, candidates: Sequence[Hashable]) -> list[EvalResult]:
        plan = self.feedback_plan(subgraph)
        jobs = [self._job(subgraph, c, plan) for c in candidates]
        results = self.pool.evaluate_many(jobs)
        times = [r.median_ms for r in results if r.ok and r.median_ms]
        if times:
            key = _digest(subgraph)
            self._best_ms[key] = min(times + [self._best_ms.get(key, float("inf"))])
        return [
            self._with_roofline(subgraph, c, r) for c, r in zip(candidates, results, strict=True)
        ]

    def baselines(self, subgraph: Subgraph) -> dict[str, EvalResult]:
        from .runtime import BaselineCandidate

        names = ("eager", "inductor")
        jobs = [self._job(subgraph, BaselineCandidate(n)) for n in names]
        return dict(zip(names, self.pool.evaluate_many(jobs), strict=True))

    def _with_roofline(
        self, subgraph: Subgraph, candidate: object, result: EvalResult
    ) -> EvalResult:
        """The worker's findings; the roofline here only when an OK result came back without
        one (its feedback failed: details["feedback_error"])."""
        if not result.ok or result.median_ms is None:
            return result
        if any(f.tool == "roofline" for f in result.findings):
            return result
        from .profilers.roofline import classify

        work, roofs = self._work_and_roofs(subgraph)
        knobs = dict(getattr(candidate, "knobs", ()) or ())
        report = classify(result.median_ms, work.flops, work.bytes, roofs, knobs=knobs)
        return dataclasses.replace(result, findings=(*report.findings, *result.findings))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


def make_proposer(options: Options, environ: Mapping[str, str] | None = None) -> Proposer:
    """The proposer `options.proposer` names. "llm" checks its package and endpoint settings
    here, when the searcher is built, so a missing one fails once with what to set rather than
    inside every search; nodes its answers leave without children get the rules' children
    (logged)."""
    from .search import LLMProposer, RuleProposer

    if options.proposer == "llm":
        return LLMProposer.from_environ(options.llm_model, environ, fallback=RuleProposer())
    return RuleProposer()


class SubgraphSearcher:
    """On a cache miss: lower the subgraph, search it, return the winner as an artifact (or None
    when the fallback stays fastest, or no template covers the subgraph)."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.measurer = PoolMeasurer(options)
        self.proposer = make_proposer(options)

    def __call__(self, subgraph: Subgraph) -> Any:
        from .cache import KernelArtifact, Provenance
        from .codegen import Unsupported, lower, render
        from .search import (
            Budget,
            SearchMemory,
            codegen_space,
            default_memory_path,
            optimize,
        )

        selected = self.options.search_patterns
        if selected and subgraph.pattern not in selected:
            log.info(
                "kernelpro: %s %s is not in search_patterns (%s): fallback",
                subgraph.graph,
                subgraph.pattern,
                ", ".join(selected),
            )
            return None
        try:
            lower(subgraph)
        except Unsupported as e:
            log.info("kernelpro: no template for %s subgraph (%s): fallback", subgraph.pattern, e)
            return None
        log_dir = os.path.join(_cache_dir(self.options), "logs")
        os.makedirs(log_dir, exist_ok=True)
        log_path = os.path.join(log_dir, f"{subgraph.key.digest[:16]}.jsonl")
        outcome = optimize(
            subgraph,
            space=codegen_space(),  # type: ignore[arg-type]
            measurer=self.measurer,
            proposer=self.proposer,
            budget=Budget.from_options(self.options),
            memory=SearchMemory(default_memory_path(_cache_dir(self.options))),
            log_path=log_path,
            progress=self.options.progress,
            objective=self.options.objective,
            min_gain_ms=self.options.min_gain_ms(),
            batch_size=self.options.workers,
        )
        baselines = {k: r.median_ms for k, r in outcome.baselines.items() if r.ok and r.median_ms}
        if outcome.uses_fallback or outcome.result is None:
            log.info(
                "kernelpro: %s %s: the fallback (%s) stays fastest after %d trials",
                subgraph.graph,
                subgraph.pattern,
                outcome.winner,
                outcome.trials,
            )
            return None
        return KernelArtifact(
            **winner_fields(outcome.winner, render, subgraph.device),
            kernel_ms=outcome.result.median_ms,
            baselines_ms=baselines,
            sol_fraction=outcome.result.sol_fraction,
            provenance=Provenance(search_log=log_path),
        )


def winner_fields(winner: Any, render: Any, device: Any = None) -> dict[str, Any]:
    """The artifact fields of a winning candidate: a KernelSpec is rendered; free-form source
    is stored as written, and a CUDA winner also stores its cubin for `device` (default: the
    current one) and its launch metadata, so a cache hit loads without a compiler."""
    from .runtime.candidate import SourceCandidate

    if isinstance(winner, SourceCandidate):
        fields: dict[str, Any] = {
            "language": winner.language,
            "source": winner.source,
            "entry": winner.entry,
        }
        if winner.language == "cuda":
            from .runtime.cuda_driver import cubin_artifact_fields

            fields.update(cubin_artifact_fields(winner.source, winner.entry, device))
        return fields
    rendered = render(winner)
    return {
        "language": rendered.language,
        "source": rendered.source,
        "entry": rendered.entry,
        "spec_json": winner.to_json(),
    }


def _digest(subgraph: Any) -> str:
    try:
        return str(subgraph.key.digest)
    except (AttributeError, ValueError):
        return "unkeyed"


def _cache_dir(options: Options) -> str:
    """One answer for logs, search memory and ceilings: the cache's own rule
    (option > $KERNELPRO_CACHE_DIR > ~/.cache/kernelpro)."""
    from .cache.store import resolve_cache_dir

    return str(resolve_cache_dir(options.cache_dir))


def default_provider(options: Options) -> KernelProvider:
    """Cache lookups (every policy but "off"), plus search on misses under "on-miss".
    Without a CUDA GPU there is nothing to look up: every subgraph runs on the fallback."""
    if options.search == "off" or not torch.cuda.is_available():
        return NullProvider()
    from .cache import CacheProvider

    searcher = SubgraphSearcher(options) if options.search == "on-miss" else None
    return CacheProvider.from_options(options, loader=load_artifact, searcher=searcher)
