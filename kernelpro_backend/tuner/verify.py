"""Re-proving cached kernels on this machine: the validator behind `kernelpro cache verify`.

Owns: `CacheEntryValidator`, which for one cache entry rebuilds the PyTorch reference from the
entry's canonical subgraph text and key (fx_passes.rebuild), and proves the entry's stored
bytes (tuner.artifacts.artifact_candidate: what a cache hit loads), never loading any of them in
this process, with the evaluator the search uses (a runtime `Job` in the isolated `WorkerPool`: fresh seeded
inputs, poisoned outputs, dtype tolerances, inputs unmodified, determinism, the speed-of-light
check), optionally re-timing it and the eager/Inductor baselines — a re-timed entry made elsewhere
(imported, another toolchain or GPU model) comes back recorded as proved on this machine.
Must not: decide what to delete or touch the store (cache.maintenance.verify does), or hold
validation logic of its own (runtime/ does): it only connects rebuild, artifact and evaluator.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable, Sequence
from typing import Any

from ..cache.artifact import Entry, KernelArtifact, utc_now
from ..cache.maintenance import ValidatorUnavailable, Verdict
from ..cache.toolchain import Toolchain, current_arch, current_gpu, current_toolchain
from ..codegen.templates.cutlass import CUTLASS_TEMPLATES
from ..fx_passes.rebuild import RebuildError, rebuild_subgraph
from ..paths import CacheLayout
from ..runtime.cuda.compile import NVCC_TIMEOUT_S
from ..runtime.job import Job
from ..runtime.pool import START_TIMEOUT_S
from ..runtime.result import EvalResult
from ..runtime.worker_setup import WorkerSetup
from .artifacts import artifact_candidate
from .cutlass_builds import CutlassBuilds

# Runs jobs in isolation and returns their results in order (WorkerPool.evaluate_many).
Evaluate = Callable[[Sequence[Job]], list[EvalResult]]


class CacheEntryValidator:
    """Callable on a cache `Entry`, returning a `Verdict` for `cache.maintenance.verify`.

    with CacheEntryValidator(retime=True) as validator:
        report = verify(cache, validator, dry_run=True)
    """

    def __init__(
        self,
        evaluate: Evaluate | None = None,
        arch: str | None = None,
        toolchain: Toolchain | None = None,
        retime: bool = False,
        seed: int | None = None,
        workers: int = 1,
        timeout_s: float = 120,
        cache_dir: str | None = None,
        check_timing_s: float = 0.05,
        nvcc_timeout_s: float = NVCC_TIMEOUT_S,
        start_timeout_s: float = START_TIMEOUT_S,
        gpu: str | None = None,
        measure_ceilings: bool | None = None,
    ) -> None:
        self.arch = arch or current_arch()
        self.toolchain = toolchain or current_toolchain()
        self.gpu = gpu or current_gpu()
        self.retime = retime
        # Fresh inputs: not the search's seed 0, and a new one each run (printed on failures).
        self.seed = seed if seed is not None else 1 + secrets.randbelow(10**6)
        self.workers = workers
        self.timeout_s = timeout_s
        self.cache_dir = cache_dir
        # The workers' cubins and the ceilings go where the cache is (paths.py).
        self.setup = WorkerSetup(CacheLayout.of(cache_dir), nvcc_timeout_s)
        self.start_timeout_s = start_timeout_s
        self.check_timing_s = check_timing_s  # timed runs per entry when only checking
        self._evaluate = evaluate
        # The speed-of-light check needs the device's ceilings; an injected evaluator (tests)
        # runs without them unless asked.
        self.measure_ceilings = evaluate is None if measure_ceilings is None else measure_ceilings
        self._pool: Any = None
        self._ceilings: Any = None

    # -- one entry --------------------------------------------------------------------------
    def __call__(self, entry: Entry) -> Verdict:
        key, artifact = entry.key, entry.artifact
        if key.arch != self.arch:
            return Verdict("skipped", f"built for {key.arch}; this machine is {self.arch}")
        if not artifact.subgraph_text:
            return Verdict("failed", "no subgraph text stored: the reference cannot be rebuilt")
        try:
            subgraph = rebuild_subgraph(
                artifact.subgraph_text, key.subgraph, artifact.kind, artifact.pattern
            )
        except RebuildError as e:
            return Verdict("failed", f"reference does not rebuild: {e}")
        # Nothing of the entry runs in this process: the worker loads it (a load failure comes
        # back as the job's result), and a tampered source can only act inside the worker.
        try:
            candidate = artifact_candidate(artifact)
        except ValueError as e:
            return Verdict("failed", f"does not load in the evaluator: {e}")
        self._build_library(artifact)
        job = Job.from_subgraph(
            subgraph, candidate, seed=self.seed, ceilings=self._ceilings_for(subgraph)
        )
        if not self.retime:
            job = dataclasses.replace(job, timing_budget_s=self.check_timing_s)
        jobs = [job, *job.baselines()] if self.retime else [job]
        results = self.evaluate(jobs)
        result = results[0]
        if not result.ok:
            # Judge the kernel only where PyTorch's own eager run of the reference passes the
            # same checks; otherwise the machine, not the kernel, is at fault.
            eager = results[1] if self.retime else self.evaluate(job.baselines()[:1])[0]
            if not eager.ok:
                where = str(eager.details.get("traceback", "")).strip()
                raise ValidatorUnavailable(
                    f"the eager reference of {artifact.pattern} {key.short()} fails here too "
                    f"({eager.status.value}: {eager.message}); fix the environment and re-run"
                    + (f"\n{where}" if where else "")
                )
            return Verdict("failed", f"{result.status.value}: {result.message} (seed {self.seed})")
        if not self.retime:
            return Verdict("ok", "validated", measured_ms=result.median_ms)
        return self._retimed(
            artifact, result, dict(zip(("eager", "inductor"), results[1:], strict=True))
        )

    def _build_library(self, artifact: KernelArtifact) -> None:
        """A CUTLASS entry's library, built here from its spec first (1-3 minutes of nvcc: not
        in the job's timeout); the worker then loads it. A failed build fails the job there."""
        if artifact.template not in CUTLASS_TEMPLATES:
            return
        from ..codegen import KernelSpec

        spec = KernelSpec.from_json(str(artifact.spec_json))
        CutlassBuilds(self.setup.layout.cubin_root, 1).build([spec])

    def _retimed(
        self, artifact: KernelArtifact, result: EvalResult, baselines: dict[str, EvalResult]
    ) -> Verdict:
        baseline_ms = {n: r.median_ms for n, r in baselines.items() if r.ok and r.median_ms}
        made = artifact.provenance
        reason = "validated, re-timed"
        joules: dict[str, Any] = {
            "kernel_j": artifact.kernel_j,
            "baselines_j": artifact.baselines_j,
        }
        if not made.proved_on(self.toolchain, self.gpu) and not baseline_ms:
            # Proved correct, but not timed against this machine's fallback: still not its own.
            return Verdict(
                "ok",
                "validated; the baselines did not run here, so it is not re-timed",
                measured_ms=result.median_ms,
            )
        if not made.proved_on(self.toolchain, self.gpu):
            # Proved and timed here now: the entry is this machine's from here on.
            tools = {**made.tools, "made_on": made.where(), "reproved": utc_now()}
            made = dataclasses.replace(
                made, toolchain=self.toolchain, gpu=self.gpu, origin="reproved", tools=tools
            )
            reason = "re-proved and re-timed on this machine"
            # joules read on another GPU say nothing of this one's (not re-measured here): an
            # entry chosen for them is then served only where it clears the time rule
            joules = {"kernel_j": None, "baselines_j": {}}
        updated = dataclasses.replace(
            artifact,
            kernel_ms=result.median_ms,
            baselines_ms=baseline_ms or artifact.baselines_ms,
            sol_fraction=result.sol_fraction,
            provenance=made,
            **joules,
        )
        if baseline_ms and result.median_ms is not None:
            name, best = min(baseline_ms.items(), key=lambda kv: kv[1])
            if result.median_ms >= best:
                reason += f"; now slower than {name} ({result.median_ms:.4g} vs {best:.4g} ms)"
        return Verdict("ok", reason, measured_ms=result.median_ms, updated=updated)

    # -- the evaluator ----------------------------------------------------------------------
    def evaluate(self, jobs: Sequence[Job]) -> list[EvalResult]:
        if self._evaluate is not None:
            return self._evaluate(jobs)
        if self._pool is None:
            from ..runtime import WorkerPool

            try:
                self._pool = WorkerPool(
                    workers=self.workers,
                    timeout_s=self.timeout_s,
                    setup=self.setup,
                    start_timeout_s=self.start_timeout_s,
                )
            except Exception as e:
                raise ValidatorUnavailable(f"cannot start the evaluator's workers: {e}") from e
        return self._pool.evaluate_many(jobs)  # type: ignore[no-any-return]

    def _ceilings_for(self, subgraph: Any) -> Any:
        """The device ceilings the search uses (from the cache dir), for the speed-of-light
        check; None off CUDA or when not measuring them (the worker then decides)."""
        if subgraph.device.type != "cuda" or not self.measure_ceilings:
            return None
        if self._ceilings is None:
            from ..profilers.ceilings import Ceilings

            try:
                self._ceilings = Ceilings.load_or_measure("cuda", self.setup.layout.root)
            except Exception as e:
                raise ValidatorUnavailable(f"cannot load or measure GPU ceilings: {e}") from e
        return self._ceilings

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self) -> CacheEntryValidator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
