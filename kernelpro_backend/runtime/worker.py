"""Evaluating one job end to end, and the loop a worker process runs.

Owns: `evaluate_job` (load -> validate -> time -> speed-of-light check -> energy -> the
job's feedback plan: roofline and stage-2 findings, runtime/feedback.py), which turns every
expected failure into an `EvalResult`, and `worker_main`, the process entry point that pool.py
spawns (one CUDA context per process).
Must not: manage processes (pool.py does) or decide what to try; a failure of the feedback
never fails the candidate.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import pickle
import tempfile
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch

from ..fx_passes.subgraph import IntRange, random_inputs
from ..paths import CacheLayout
from ..profilers.energy import EnergyReading
from ..profilers.findings import Finding
from .candidate import BaselineCandidate, CandidateLoadError, load_kernel
from .cuda.host import use_library_dir
from .energy import kernel_energy
from .fallback import TensorMeta
from .gpu_lock import PoolGpuLock, holding_gpu
from .isolation import enter_workdir
from .job import Job
from .phases import Phases
from .precision import precision_mode
from .precompile import precompile
from .relayout import as_timed
from .result import EvalResult, EvalStatus
from .sol_check import beyond_light_result
from .timing import OffStreamWork, Timing, time_kernel
from .validate import validate
from .worker_setup import WorkerSetup

TIMING_SET_BYTES = 2**30  # rotating input sets share at most 1 GiB
_COMPILE_ERRORS = {
    "CompilationError", "CompileTimeAssertionFailure", "OutOfResources", "PTXASError",
}  # fmt: skip
_FATAL_MARKERS = (
    "CUDA error",
    "illegal memory access",
    "misaligned address",
    "unspecified launch failure",
    "device-side assert",
    "illegal instruction",
)


class WorkerState:
    """What a worker keeps between jobs: its scratch dir, its setup and the device ceilings."""

    def __init__(self, workdir: Path, setup: WorkerSetup | None = None) -> None:
        self.workdir = workdir
        self.setup = setup or WorkerSetup(CacheLayout.of())
        self.ceilings: dict[str, Any] = {}
        use_library_dir(self.setup.layout.cubin_root)  # where CUTLASS candidates' libraries are

    def sol_ms(self, job: Job, device: torch.device) -> float | None:
        if job.sol_ms is not None or job.work is None or device.type != "cuda":
            return job.sol_ms
        from ..profilers.ceilings import Ceilings
        from ..profilers.speed_of_light import SpeedOfLight

        name = str(device)
        if name not in self.ceilings:
            self.ceilings[name] = Ceilings.load_or_measure(device, self.setup.layout.root)
        return SpeedOfLight.time_ms(job.work, self.ceilings[name], job.precision)


def is_fatal(error: BaseException) -> bool:
    """A CUDA error leaves the context unusable: the worker must exit after reporting it."""
    text = f"{type(error).__name__}: {error}"
    return type(error).__name__ == "AcceleratorError" or any(m in text for m in _FATAL_MARKERS)


def _failure(error: BaseException, stage: str) -> EvalResult:
    names = {c.__name__ for c in type(error).__mro__}
    status = (
        EvalStatus.COMPILE_ERROR
        if isinstance(error, CandidateLoadError) or names & _COMPILE_ERRORS
        else EvalStatus.SUSPICIOUS  # work left on a stream the timing does not wait for
        if isinstance(error, OffStreamWork)
        else EvalStatus.CRASHED
    )
    tail = "".join(traceback.format_exception(error)[-6:])[-3000:]
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    details = {"stage": stage, "traceback": tail, "fatal": is_fatal(error)}
    log = getattr(error, "log", None)  # a compiler's trimmed output (cuda/compile.py)
    if isinstance(log, str) and log:
        details["compiler_log"] = log
    return EvalResult(
        status, message=f"{stage}: {type(error).__name__}: {first}"[:500], details=details
    )


def _timing_sets(
    job: Job, device: torch.device, l2_bytes: int, metas: Sequence[TensorMeta] | None = None
) -> list[list[torch.Tensor]]:
    """Input sets rotated between timed calls so that no call finds its inputs in L2: enough
    sets to cover twice the L2, at most TIMING_SET_BYTES together; one set when a set alone
    is over twice the L2 (a 4 GB input needs no second copy to defeat a 50 MB cache).
    `metas`: drawn at these (the graph's strides) instead of the job's."""
    metas = list(job.input_meta if metas is None else metas)
    ranges = {i: IntRange(lo, hi) for i, lo, hi in job.int_ranges}
    set_bytes = sum(math.prod(s) * getattr(torch, d).itemsize for s, _, d in metas) or 1
    if set_bytes >= 2 * l2_bytes and l2_bytes:
        count = 1
    else:
        count = max(3, min(32, math.ceil(2 * l2_bytes / set_bytes)))
        count = max(2, min(count, TIMING_SET_BYTES // set_bytes))
    return [random_inputs(metas, ranges, job.seed * 1000 + 500 + k, device) for k in range(count)]


def _l2_bytes(device: torch.device) -> int:
    if device.type != "cuda":
        return 0
    return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 * 2**20))


def evaluate_job(job: Job, state: WorkerState, gpu_lock: Any = None) -> EvalResult:
    """Load, compile, time and validate `job.candidate`. Expected failures come back as
    results; a CUDA fault comes back as CRASHED with details["fatal"] set. The seconds of each
    phase are in details["phase_s"]."""
    phases = Phases()
    try:
        result = _evaluate(job, state, phases, gpu_lock)
    finally:
        if torch.cuda.is_available() and job.device.startswith("cuda"):
            torch.cuda.empty_cache()  # an idle worker holds no GPU memory for the next one
    return dataclasses.replace(result, details={**result.details, "phase_s": phases.rounded()})


def _evaluate(job: Job, state: WorkerState, phases: Phases, gpu_lock: Any) -> EvalResult:
    device = torch.device(job.device)
    if device.type == "cuda" and device.index is not None:  # bare "cuda" is the current one
        torch.cuda.set_device(device)
    reference = pickle.loads(job.reference)
    cudnn = (job.fallback.cudnn_benchmark, job.fallback.cudnn_deterministic)
    with precision_mode(job.precision, *cudnn):
        try:
            with phases("load"):
                kernel = load_kernel(
                    job.candidate,
                    reference,
                    state.workdir,
                    cubin_dir=state.setup.layout.cubin_root,
                    nvcc_timeout_s=state.setup.nvcc_timeout_s,
                    inductor_options=dict(job.fallback.inductor),
                )
            with phases("compile"):  # outside the GPU lock: CPU work overlaps other timings
                precompile(kernel, job.input_meta, device)
        except Exception as e:
            return _failure(e, "load")
        with holding_gpu(gpu_lock, phases):
            result = _on_gpu(job, state, kernel, reference, device, phases)
        if _feedback_after(job, result):
            # ptxas/sass read the compiled kernel: CPU work that need not hold the GPU.
            with phases("feedback"):
                findings, more = _feedback(job, kernel, result.median_ms or 0.0, (), state)
            result = dataclasses.replace(
                result, findings=findings, details={**result.details, **more}
            )
        return result


# Stage-2 tools that run the kernel (and so need the GPU to themselves).
GPU_TOOLS = frozenset({"ncu", "timeline", "energy"})


def _gpu_feedback(job: Job) -> bool:
    return job.feedback is not None and bool(GPU_TOOLS & set(job.feedback.tools))


def _feedback_after(job: Job, result: EvalResult) -> bool:
    """Whether the feedback runs after the GPU is released: an OK, proved candidate whose
    stage-2 tools only read its compiled code."""
    return (
        job.feedback is not None
        and not _gpu_feedback(job)
        and result.ok
        and not result.details.get("abandoned")
        and not isinstance(job.candidate, BaselineCandidate)
    )


def _on_gpu(
    job: Job,
    state: WorkerState,
    kernel: Any,
    reference: Any,
    device: torch.device,
    phases: Phases,
) -> EvalResult:
    """Time (giving up early on a candidate that cannot win), prove, check against the speed
    of light, then energy and the feedback plan: everything that needs the GPU to itself."""
    baseline = isinstance(job.candidate, BaselineCandidate)
    describe = {"candidate": job.candidate.describe(), "subgraph": job.name}
    abandon = None if baseline else job.abandon_above_ms
    try:
        with phases("time"):
            l2 = _l2_bytes(device)
            timed, metas = as_timed(job, kernel)
            sets = _timing_sets(job, device, l2, metas)
            timing: Timing = time_kernel(
                timed,
                sets,
                device,
                job.timing_budget_s,
                l2 or 1,
                abandon,
                job.timing_settle,
                job.timing_heat_s,
            )
            del sets
    except Exception as e:
        return _failure(e, "timing")
    if timing.method.endswith("-abandoned"):
        return _abandoned(timing, abandon, describe)
    try:
        with phases("validate"):
            # Baselines are what PyTorch runs: they are checked but not rejected for
            # run-to-run differences (e.g. atomics in index_add), only recorded.
            rejection, details = validate(kernel, reference, job, device, not baseline)
    except Exception as e:
        return _failure(e, "validate")
    if rejection is not None:
        return EvalResult(
            rejection.status, message=rejection.message, details={**describe, **rejection.details}
        )
    try:
        sol_ms = state.sol_ms(job, device)
        with phases("energy"):
            energy = _energy(job, timed, metas, device, timing) if job.measure_energy else None
    except Exception as e:
        return _failure(e, "timing")
    details = {**describe, **details, "timing_method": timing.method}
    if timed is not kernel:
        details["in_graph_copies"] = True  # timed with the copies its graph makes around it
    if energy is not None:
        details["energy"] = energy.to_dict()
    suspicious = beyond_light_result(job, baseline, timing, sol_ms, details)
    if suspicious is not None:
        return suspicious
    findings: tuple[Finding, ...] = ()
    if _gpu_feedback(job) and not baseline:
        with phases("feedback"):
            inputs = _timing_sets(job, device, 0)[0]
            findings, more = _feedback(job, kernel, timing.median_ms, inputs, state)
            del inputs
        details.update(more)
    return EvalResult(
        EvalStatus.OK,
        median_ms=timing.median_ms,
        spread_ms=timing.spread_ms,
        times_ms=timing.times_ms,
        sol_ms=sol_ms,
        sol_fraction=min(1.0, sol_ms / timing.median_ms) if sol_ms else None,
        energy_j=energy.joules_per_call if energy is not None else None,
        message=f"ok: {timing.median_ms:.4g} ms +- {timing.spread_ms:.2g} ({timing.method})",
        details=details,
        findings=findings,
    )


def _abandoned(timing: Timing, limit: float | None, describe: dict[str, Any]) -> EvalResult:
    """A candidate slower than the search's limit after its warm-up runs (a short kernel: its
    first CUDA-graph replays): recorded with that rough time (the tree learns it is slow) and
    marked unproved, so it is never a winner."""
    runs = "first CUDA-graph replays" if timing.method.startswith("cuda_graph") else "warm-up runs"
    return EvalResult(
        EvalStatus.OK,
        median_ms=timing.median_ms,
        spread_ms=timing.spread_ms,
        times_ms=timing.times_ms,
        message=f"abandoned: {timing.median_ms:.4g} ms in {runs}, over the "
        f"{limit:.4g} ms this search still needs; not proved",
        details={**describe, "abandoned": True, "timing_method": timing.method},
    )


def _energy(
    job: Job, timed: Any, metas: list[TensorMeta], device: torch.device, timing: Timing
) -> EnergyReading | None:
    """Joules a call of what was timed, on inputs as it was timed on."""
    return kernel_energy(timed, _timing_sets(job, device, 0, metas)[0], device, timing)


def _feedback(
    job: Job, kernel: Any, measured_ms: float, inputs: Sequence[torch.Tensor], state: WorkerState
) -> tuple[tuple[Finding, ...], dict[str, Any]]:
    """The findings of `job.feedback` for a timed candidate, and the details to record. A
    failure is printed and recorded as details["feedback_error"]; the candidate stays OK."""
    from ..profilers.api import one_line
    from .feedback import candidate_feedback, float_element_bytes, kernel_knobs

    assert job.feedback is not None
    try:
        if job.work is None:
            raise ValueError("the job carries no work counts (make it with Job.from_subgraph)")
        with precision_mode(job.precision):
            feedback = candidate_feedback(
                job.feedback,
                kernel=kernel,
                candidate=job.candidate,
                measured_ms=measured_ms,
                work=job.work,
                inputs=inputs,
                knobs=kernel_knobs(kernel),
                element_bytes=float_element_bytes(inputs or _meta_tensors(job)),
                workdir=state.workdir,
                precision=job.precision,
                cubin_dir=state.setup.layout.cubin_root,
            )
    except Exception as e:
        message = one_line(e)
        print(f"kernelpro: FEEDBACK FAILED {job.name}: {message}", flush=True)
        return (), {"feedback_error": message, **({"fatal": True} if is_fatal(e) else {})}
    return feedback.findings, feedback.details()


def _meta_tensors(job: Job) -> list[torch.Tensor]:
    """Empty stand-ins of the job's inputs (dtype only), for what reads dtypes, not values."""
    return [torch.empty(0, dtype=getattr(torch, d)) for _, _, d in job.input_meta]


def _still_healthy(job: Job) -> bool:
    if not job.device.startswith("cuda"):
        return True
    try:
        torch.cuda.synchronize()
        return True
    except Exception:
        return False


def _warm_inductor() -> None:
    """Pay Inductor's first-compile cost (imports, caches, its compile workers) once per worker
    at start, not in the first subgraph's baseline (seen: 8 s of a 12 s baseline on H100).
    Workers compile one graph at a time: no pool of compile subprocesses per worker."""
    if not torch.cuda.is_available():
        return
    try:
        import torch._inductor.config as inductor_config

        inductor_config.compile_threads = 1
        x = torch.randn(64, 64, device="cuda")
        torch.compile(lambda t: torch.softmax(t * 2.0, -1).sum(0), backend="inductor")(x)
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    except Exception as e:  # a warm-up failure only costs time later
        print(f"kernelpro: worker warm-up failed: {type(e).__name__}: {e}", flush=True)


def worker_main(
    conn: Connection, serialize_gpu: bool = False, setup: WorkerSetup | None = None
) -> None:
    """Serve jobs from `conn` until it closes: receive (job_id, Job), send (job_id, result
    dict, fatal). After a fatal CUDA error the worker exits and the pool starts a new one.
    `setup`: the caller's cache layout and limits (None: the defaults of this process)."""
    # Real-size subgraphs allocate and free blocks of several sizes (6 GB inputs, 12 GB float64
    # references): expandable segments keep the freed memory usable for the next size.
    with contextlib.suppress(Exception):
        torch.cuda.memory._set_allocator_settings("expandable_segments:True")
    # Paths are made absolute before the worker leaves the user's directory for its own.
    setup = (setup or WorkerSetup(CacheLayout.of())).absolute()
    state = WorkerState(Path(tempfile.mkdtemp(prefix="kernelpro-worker-")), setup)
    enter_workdir(state.workdir)  # runtime/isolation.py: never the user's working directory
    gpu_lock = PoolGpuLock(conn) if serialize_gpu else None
    _warm_inductor()
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        job_id, job = message
        try:
            result = evaluate_job(job, state, gpu_lock)
        except Exception as e:  # a bug in the evaluator itself: report it, keep serving
            result = _failure(e, "evaluator")
        fatal = bool(result.details.get("fatal")) or not _still_healthy(job)
        conn.send((job_id, result.to_dict(), fatal))
        if fatal:
            os._exit(0)
