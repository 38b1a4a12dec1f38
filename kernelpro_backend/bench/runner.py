"""Running workloads under every mode in one process and checking each against eager.

Owns: the per-mode procedure (fresh weights, first call timed as compile + warm-up, outputs
and gradients kept for the check; then every mode's step timed in interleaved rounds, the
median of its round medians, and on the GPU its joules per step; `torch._dynamo.reset()` around each workload), the float64
reference run for low-precision mismatches, and collecting `WorkloadResult`s, each handed to
`RunConfig.on_workload` as soon as it is final (a run cut short keeps the finished workloads;
there are no provisional results).
`new_report` starts the report of a run (device, versions, modes, the GPU's power limit).
Must not: parse arguments or render tables.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import platform
import sys
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any

import torch

from ..profilers.energy import NvmlMeter, power_cap
from ..runtime.timing import launch_timing, summarize
from .check.compare import compare, named_tensors, needs_fp64
from .check.reference import autocast_step, fp64_or_none, grads, release
from .modes import EAGER, KERNELPRO, Mode
from .results import (
    FAILED,
    OK,
    UNCHECKED,
    WRONG,
    BenchReport,
    ModeResult,
    SubgraphPoint,
    WorkloadResult,
)
from .sessions import (
    fallback_used,
    graph_verdicts,
    kernels_used,
    rewrites_made,
    settle_verdicts,
)
from .timing import steady_ms, step_energy, step_timing, time_first_call
from .workload import Workload

log = logging.getLogger("kernelpro.bench")

SolFn = Callable[[Workload], "float | None"]
SubgraphFn = Callable[[Workload], "list[SubgraphPoint]"]


@dataclasses.dataclass
class RunConfig:
    modes: list[Mode]
    cpu_reps: int = 10
    gpu_warmup_ms: int = 25
    gpu_rep_ms: int = 100
    rounds: int = 5  # interleaved timing rounds: each mode's time is the median of its rounds
    # Optional hooks: the speed-of-light time of a workload, and per-subgraph roofline points.
    sol_fn: SolFn | None = None
    subgraph_fn: SubgraphFn | None = None
    progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)
    # Called with each workload's final result as it finishes, so a caller can save it (one
    # JSON line per workload, `tables.append_jsonl`): a run killed by its time limit keeps the
    # workloads that finished.
    on_workload: Callable[[WorkloadResult], None] | None = None
    # Entered around each mode's compile (first call) with (workload, mode name): a watchdog
    # that gives up on a compile that outlives its limit.
    watch_compile: Callable[[Workload, str], AbstractContextManager[object]] | None = None


def prepare_mode(
    workload: Workload, mode: Mode, sessions: list[Any] | None = None
) -> tuple[dict[str, torch.Tensor], float, Callable[[], None]]:
    """Compile one mode: returns (named outputs of the first call, compile seconds, the step
    to time). The step of a training workload is a whole optimizer step. `sessions` collects
    kernelpro's compile sessions (forward and backward: both compile in the first call)."""
    device = workload.device
    model = workload.fresh_model()
    fn = mode.wrap(model, sessions)
    inputs = workload.inputs
    if workload.loss_fn is None:

        def infer() -> None:
            with torch.no_grad():
                fn(*inputs)

        with torch.no_grad():
            out, compile_s = time_first_call(lambda: fn(*inputs), device)
        return named_tensors("out", out), compile_s, infer

    loss_fn = workload.loss_fn

    def forward_backward() -> tuple[object, torch.Tensor]:
        out = fn(*inputs)
        loss = loss_fn(out)
        loss.backward()
        return out, loss

    (out, loss), compile_s = time_first_call(forward_backward, device)
    tensors = {**named_tensors("out", out), "loss": loss.detach(), **grads(model)}
    optimizer = workload.make_optimizer(model.parameters()) if workload.make_optimizer else None

    def train_step() -> None:
        if optimizer is not None:
            optimizer.zero_grad(set_to_none=True)
        else:
            model.zero_grad(set_to_none=True)
        loss_fn(fn(*inputs)).backward()
        if optimizer is not None:
            optimizer.step()

    return tensors, compile_s, train_step


def _time_step(step: Callable[[], None], device: torch.device, config: RunConfig) -> float:
    """One median timing of a step with the run's repetition settings."""
    return step_timing(
        step,
        device,
        cpu_reps=config.cpu_reps,
        gpu_warmup_ms=config.gpu_warmup_ms,
        gpu_rep_ms=config.gpu_rep_ms,
    ).median_ms


def _time_interleaved(
    steps: dict[str, Callable[[], None]],
    device: torch.device,
    config: RunConfig,
    steady: bool = False,
) -> tuple[dict[str, list[float]], dict[str, float], dict[str, str]]:
    """Each mode's median step time in each of `config.rounds` rounds, the modes' rounds
    interleaved so that clock, thermal and allocator drift hit every mode alike (one sequential
    run per mode differed by up to 1.65x between identical codes on the H100). With `steady`
    (training steps on the GPU) each round also runs the steps back to back (`steady_ms`).
    Returns (mode -> round ms, mode -> steady ms, mode -> error message for modes whose step
    raised)."""
    times: dict[str, list[float]] = {name: [] for name in steps}
    rates: dict[str, list[float]] = {name: [] for name in steps}
    errors: dict[str, str] = {}
    for _ in range(config.rounds):
        for name, step in steps.items():
            if name in errors:
                continue
            try:
                times[name].append(_time_step(step, device, config))
                if steady:
                    rates[name].append(steady_ms(step, device, times[name][-1]))
            except Exception as e:
                log.debug("timing mode %s failed", name, exc_info=True)
                errors[name] = f"timing failed: {_one_line(e)}"
    steadies = {n: summarize(t, "rounds").median_ms for n, t in rates.items() if t}
    ok = {n: t for n, t in times.items() if t and n not in errors}
    return ok, {n: ms for n, ms in steadies.items() if n not in errors}, errors


def step_peak_mib(step: Callable[[], None], device: torch.device) -> float | None:
    """MiB one call of `step` allocates at its peak beyond what was allocated before it (CUDA
    caching-allocator statistics); None off the GPU."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    step()
    torch.cuda.synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - before) / 2**20


def _one_line(error: BaseException, limit: int = 500) -> str:
    """An exception as one line (Dynamo's errors span many lines; the cause is on line 2)."""
    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    return f"{type(error).__name__}: {text}"[:limit]


def _unwatched(workload: Workload, mode: str) -> AbstractContextManager[object]:
    return contextlib.nullcontext()


@dataclasses.dataclass
class _Checker:
    """Each mode's outputs against eager's (the first mode), with the float64 (or float32)
    reference run once, when first needed."""

    workload: Workload
    reference: dict[str, torch.Tensor] | None = None
    fp64: dict[str, torch.Tensor] | None = None
    no_fp64: str = ""  # why the float64 reference could not be run, once it could not

    def check(self, mode: str, tensors: dict[str, torch.Tensor], result: ModeResult) -> None:
        if mode == EAGER:
            self.reference = tensors
            result.max_abs_err = result.max_rel_err = 0.0
            if autocast_step(self.workload):
                # A mixed-precision step always misses the elementwise tolerance: take its
                # reference now, while only eager's state is in memory (after the compiled
                # modes' models and optimizers, a 0.5B model's float32 run no longer fits).
                self.fp64, self.no_fp64 = fp64_or_none(self.workload)
            return
        if self.reference is None:
            result.status, result.message = UNCHECKED, "eager failed, so nothing to check against"
            return
        if self.fp64 is None and not self.no_fp64 and needs_fp64(tensors, self.reference):
            self.fp64, self.no_fp64 = fp64_or_none(self.workload)
        check = compare(tensors, self.reference, self.fp64)
        result.max_abs_err, result.max_rel_err = check.max_abs_err, check.max_rel_err
        if not check.ok:
            result.status, result.message = WRONG, check.describe() + self.no_fp64


def run_workload(workload: Workload, config: RunConfig) -> WorkloadResult:
    """Every mode of `config` on one workload: each compiles and is checked against eager
    (which runs first: it is the reference), then all are timed in interleaved rounds."""
    results: list[ModeResult] = []
    steps: dict[str, Callable[[], None]] = {}
    checker = _Checker(workload)
    release(workload.device)
    for mode in config.modes:
        config.progress(f"[bench] {workload.name}: {mode.name} ...")
        watch = config.watch_compile or _unwatched
        sessions: list[Any] | None = [] if mode.backend == KERNELPRO else None
        try:
            with watch(workload, mode.name):
                tensors, compile_s, step = prepare_mode(workload, mode, sessions)
        except Exception as e:
            log.debug("mode %s failed on %s", mode.name, workload.name, exc_info=True)
            message = _one_line(e)
            results.append(ModeResult(mode.name, FAILED, message=message))
            config.progress(f"[bench] {workload.name}: {mode.name} FAILED: {message[:200]}")
            continue
        settle_verdicts(step, sessions)
        result = ModeResult(
            mode.name,
            OK,
            compile_s=compile_s,
            kernels=kernels_used(sessions),
            rewrites=rewrites_made(sessions),
            fallback=fallback_used(sessions),
            graphs=graph_verdicts(sessions),
        )
        checker.check(mode.name, tensors, result)
        del tensors
        results.append(result)
        steps[mode.name] = step
    graphed = {m.name: m.graphed for m in config.modes}
    steady = workload.loss_fn is not None and workload.device.type == "cuda"
    rounds, steadies, errors = _time_interleaved(steps, workload.device, config, steady)
    for result in results:
        if result.mode in errors:
            result.status, result.message = FAILED, errors[result.mode]
        result.round_ms = rounds.get(result.mode, [])
        result.median_ms = (
            summarize(result.round_ms, "rounds").median_ms if result.round_ms else None
        )
        result.steady_ms = steadies.get(result.mode)
        if result.mode in steps and result.mode not in errors and not graphed[result.mode]:
            # Under CUDA graphs a step's tensors live in the graphs' pool, allocated when they
            # were recorded: a replay allocates next to nothing, so its "peak" says nothing.
            result.step_peak_mib = step_peak_mib(steps[result.mode], workload.device)
        if steady and result.mode in steps and result.mode not in errors:
            result.launch_ms, result.launched_step_ms = launch_timing(
                steps[result.mode], workload.device
            )
        if result.mode in steps and result.mode not in errors and result.median_ms:
            energy = step_energy(steps[result.mode], workload.device, result.median_ms)
            if energy is not None:
                result.step_j, result.idle_w = energy.joules_per_call, energy.idle_watts
    del steps
    release(workload.device)
    return WorkloadResult(
        workload=workload.name,
        **workload.record(),
        modes=results,
        sol_ms=config.sol_fn(workload) if config.sol_fn else None,
        subgraphs=config.subgraph_fn(workload) if config.subgraph_fn else [],
    )


def run_workloads(
    builders: Iterable[tuple[str, Callable[[], Workload]]], config: RunConfig
) -> list[WorkloadResult]:
    """Build each workload just before it runs (full-size ones hold GPU memory) and run it.
    A workload that fails to build is reported as failed under every mode."""
    out: list[WorkloadResult] = []
    for name, build in builders:
        try:
            workload = build()
        except Exception as e:
            message = f"building the workload failed: {_one_line(e)}"
            config.progress(f"[bench] {name}: {message}")
            failed = [ModeResult(m.name, FAILED, message=message) for m in config.modes]
            out.append(WorkloadResult(name, "?", "?", "?", "?", failed))
        else:
            out.append(run_workload(workload, config))
            del workload
        if config.on_workload is not None:
            config.on_workload(out[-1])
    return out


def versions() -> dict[str, str]:
    """The versions a run's results depend on: torch, python, kernelpro, triton (if present)."""
    from ..version import __version__

    found = {"torch": torch.__version__, "python": platform.python_version()}
    found["kernelpro"] = __version__
    try:
        import triton

        found["triton"] = triton.__version__
    except ImportError:
        pass
    return found


def new_report(device: torch.device, size: str, modes: list[Mode]) -> BenchReport:
    """An empty report for a run on `device` (workloads are appended as they finish)."""
    return BenchReport(
        device=str(device),
        device_name=torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
        versions=versions(),
        size=size,
        modes=[m.name for m in modes],
        mode_descriptions={m.name: m.describe() for m in modes},
        power=_power(device),
    )


def _power(device: torch.device) -> dict[str, Any]:
    """The GPU's power limit for the report's header (read, never set); {} where unknown."""
    if device.type != "cuda":
        return {}
    try:
        cap = power_cap(NvmlMeter.open(device.index or 0))
    except Exception as e:  # a header figure: never the reason a run ends
        log.warning("the GPU's power limit could not be read (%s: %s)", type(e).__name__, e)
        return {}
    return cap.to_dict() if cap is not None else {}
