"""Two-stage feedback for one evaluated candidate, inside the worker that compiled and timed it
(the only process that holds its compiled kernels).

Stage 1 classifies the measured time against the subgraph's roofs; stage 2 runs the tools that
class calls for, limited to those the search allows (`FeedbackPlan.tools`), with ncu only for a
candidate faster than the best so far (it costs ~20 s).

Owns: `subgraph_roofs` (one effective compute roof for a subgraph's mix of tensor-core and FP32
work, and DRAM bytes/s, from the device's ceilings; the parent and the worker share it),
`FeedbackPlan` (plain data that travels inside a Job), `Feedback`, `candidate_feedback`, and
finding a candidate's compiled artefacts (Triton kernels behind its entry function, a CUDA
candidate's cubin, an ncu command that rebuilds it from its data).
Must not: time, validate or change kernels, or decide what to try (search/ reads the findings);
a tool that is unavailable or fails is recorded in `tools_skipped`, never raised.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..profilers.api import one_line, run_tools, triton_kernels_of
from ..profilers.ceilings import Ceilings
from ..profilers.findings import Bottleneck, Finding
from ..profilers.roofline import Roofs, classify
from ..profilers.speed_of_light import Work
from ..profilers.tools import ProfileTarget, registered, tools_for


def subgraph_roofs(
    work: Work, ceilings: Ceilings, precision: str, sm_count: int | None = None
) -> Roofs:
    """The roofs `work` is judged against: DRAM bytes/s, and the FLOP rate at which its mix of
    tensor-core work (at the dtype's and precision policy's peak) and FP32 work finishes in the
    compute time SpeedOfLight gives it."""
    compute_s = work.compute_s(ceilings, precision)
    flops_per_s = work.flops / compute_s if compute_s > 0 else ceilings.fp32_flops_per_s
    roofs = Roofs(bytes_per_s=ceilings.dram_bytes_per_s, flops_per_s=flops_per_s)
    return dataclasses.replace(roofs, sm_count=sm_count) if sm_count else roofs


@dataclasses.dataclass(frozen=True)
class FeedbackPlan:
    """What the parent allows the worker to run for each candidate of one subgraph."""

    roofs: Roofs
    tools: tuple[str, ...] = ("ptxas", "sass")  # stage-2 tools allowed (those the class calls for)
    ncu_below_ms: float | None = None  # ncu only for a candidate faster than this; None: any
    budget_s: float | None = None  # summed typical cost (Tool.cost_s) of the stage-2 tools
    ncu_run_timeout_s: float = 120.0  # seconds one ncu run may take (Options.ncu_run_timeout_s)


@dataclasses.dataclass(frozen=True)
class Feedback:
    findings: tuple[Finding, ...]  # roofline first, then stage 2, most severe first
    bottleneck: Bottleneck
    tools_run: tuple[str, ...]
    tools_skipped: tuple[tuple[str, str], ...]  # (tool, why)
    tool_s: tuple[tuple[str, float], ...] = ()  # (tool, seconds it ran)

    def details(self) -> dict[str, Any]:
        """JSON-ready fields for EvalResult.details and the search log."""
        return {
            "tools_run": list(self.tools_run),
            "tools_skipped": [list(pair) for pair in self.tools_skipped],
            "tool_s": dict(self.tool_s),
        }


def candidate_feedback(
    plan: FeedbackPlan,
    *,
    kernel: Any,
    candidate: Any,
    measured_ms: float,
    work: Work,
    inputs: Sequence[Any],
    knobs: Mapping[str, Any],
    element_bytes: int,
    workdir: Path,
    precision: str = "ieee",
    cubin_dir: Path | None = None,
) -> Feedback:
    """Stage 1 (roofline) and the allowed stage-2 tools for one timed candidate.

    `kernel`: the loaded candidate, already launched (a codegen SpecKernel, a free-form Triton
    entry function or a CudaKernel); `candidate`: its data (rebuilt in ncu's child process);
    `inputs`: one input set on the device; `cubin_dir`: the cubin cache ncu's child uses."""
    roof = classify(measured_ms, work.flops, work.bytes, plan.roofs, knobs=knobs)
    skipped = _not_selected(plan, roof.bottleneck, measured_ms)
    allowed = [n for n in plan.tools if n not in dict(skipped)]
    chosen = tools_for(roof.bottleneck, budget_s=plan.budget_s, among=allowed)
    names = {t.name for t in chosen}
    skipped += [
        (n, f"over the stage-2 budget of {plan.budget_s} s") for n in allowed if n not in names
    ]
    target = ProfileTarget(
        fn=kernel,
        inputs=tuple(inputs),
        knobs=dict(knobs),
        compiled=triton_kernels_of(getattr(kernel, "entry", kernel)) if chosen else (),
        cubin=getattr(kernel, "cubin", None),
        element_bytes=element_bytes,
        ncu_run_timeout_s=plan.ncu_run_timeout_s,
    )
    runnable = []
    for tool in chosen:
        why = _missing_input(tool.name, target)
        if why is None and tool.name == "ncu" and tool.available() is None:
            why = _add_ncu_command(target, kernel, candidate, workdir, precision, cubin_dir)
        if why is None:
            runnable.append(tool)
        else:
            skipped.append((tool.name, why))
    found, ran, failed = run_tools(runnable, target)
    # One kernel compiled for two input specialisations reports the same findings twice.
    unique = tuple({f.to_json(): f for f in found}.values())
    return Feedback(
        roof.findings + unique,
        roof.bottleneck,
        ran,
        tuple(skipped) + failed,
        tuple(target.seconds.items()),
    )


def kernel_knobs(kernel: Any) -> dict[str, Any]:
    """A codegen kernel's KernelSpec knobs (SpecKernel.spec.knobs); {} for free-form source."""
    knobs = getattr(getattr(kernel, "spec", None), "knobs", None)
    if isinstance(knobs, tuple) and all(isinstance(kv, tuple) and len(kv) == 2 for kv in knobs):
        return dict(knobs)
    return {}


def float_element_bytes(inputs: Sequence[Any], default: int = 4) -> int:
    """Bytes per element of the first floating-point input (sets the ideal load width)."""
    for x in inputs:
        if getattr(x, "is_floating_point", None) and x.is_floating_point():
            return int(x.element_size())
    return default


def _called_for(bottleneck: Bottleneck) -> set[str]:
    return {t.name for t in tools_for(bottleneck)}


def _not_selected(
    plan: FeedbackPlan, bottleneck: Bottleneck, measured_ms: float
) -> list[tuple[str, str]]:
    """(tool, why) for the plan's tools that will not run for this candidate's class or time."""
    known, called = registered(), _called_for(bottleneck)
    out = []
    for name in plan.tools:
        if name not in known:
            out.append((name, f"unknown tool; known: {', '.join(sorted(known))}"))
        elif name not in called:
            out.append((name, f"not called for by the {bottleneck.value} class"))
        elif name == "ncu" and plan.ncu_below_ms is not None and measured_ms >= plan.ncu_below_ms:
            out.append(
                (
                    name,
                    f"{measured_ms:.4g} ms is not faster than the best so far, "
                    f"{plan.ncu_below_ms:.4g} ms",
                )  # fmt: skip
            )
    return out


def _missing_input(name: str, target: ProfileTarget) -> str | None:
    """Why `name` has nothing to read for this candidate, or None."""
    if name == "ptxas" and not target.compiled and not target.ptxas_report:
        if target.cubin is not None:
            return "no ptxas report for a CUDA candidate (the compiler's -v output is not kept)"
        return _no_triton_kernels()
    if name == "sass" and not target.compiled and target.cubin is None:
        return _no_triton_kernels()
    return None


def _no_triton_kernels() -> str:
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "no compiled Triton kernels (interpreter: TRITON_INTERPRET=1 compiles none)"
    return "no compiled Triton kernels found behind the candidate's entry function"


def _add_ncu_command(
    target: ProfileTarget,
    kernel: Any,
    candidate: Any,
    workdir: Path,
    precision: str,
    cubin_dir: Path | None = None,
) -> str | None:
    """Point ncu at a child that rebuilds the candidate from its data (the compiled kernel does
    not pickle); None when done, else why not."""
    from .ncu_candidate import write_candidate_payload

    try:
        path = write_candidate_payload(
            candidate,
            target.inputs,
            workdir / "ncu-candidate.pkl",
            precision=precision,
            cubin_dir=cubin_dir,
        )
    except Exception as exc:
        return f"cannot hand the candidate to ncu's child process: {one_line(exc)}"
    module = "kernelpro_backend.runtime.ncu_candidate"
    target.ncu_command = [sys.executable, "-m", module, str(path)]
    target.kernel_name = _own_kernels_regex(target, kernel)
    return None


def _own_kernels_regex(target: ProfileTarget, kernel: Any) -> str | None:
    """The first launch of the candidate's own kernels, not of the fill kernel a torch.zeros
    output launches before them: their names anchored; None (the first launch) when unknown."""
    found: list[Any] = [
        getattr(k, "name", None) or getattr(k.metadata, "name", None) for k in target.compiled
    ]
    if not found:  # a CUDA candidate: the kernels its launch header names
        found = list(getattr(getattr(kernel, "spec", None), "kernels", None) or ())
    names = sorted({n for n in found if isinstance(n, str) and n})
    return f"^({'|'.join(re.escape(n) for n in names)})$" if names else None
