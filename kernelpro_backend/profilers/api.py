"""The two-stage profile of one kernel: time it, classify it against the roofs (stage 1), then
run only the tools that class calls for (stage 2).

Owns: `profile_kernel`, `ProfileReport`, `run_tools` (stage 2 on one target, failures recorded),
`time_ms` and `triton_kernels_of` (finding the compiled Triton kernels behind a callable).
Must not: change kernels or decide what to try next (search/ reads the findings).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .findings import Finding, Severity
from .roofline import RooflineReport, classify
from .tools import ProfileTarget, Tool, tools_for

_ORDER = [Severity.HIGH, Severity.MEDIUM, Severity.LOW, Severity.INFO]


@dataclasses.dataclass(frozen=True)
class ProfileReport:
    measured_ms: float
    roofline: RooflineReport
    findings: tuple[Finding, ...]  # roofline first, then tools, most severe first
    tools_run: tuple[str, ...]
    tools_skipped: tuple[tuple[str, str], ...]  # (tool, why): unavailable or failed

    def to_dict(self) -> dict[str, Any]:
        return {
            "measured_ms": self.measured_ms,
            "bottleneck": self.roofline.bottleneck.value,
            "sol_ms": self.roofline.sol_ms,
            "sol_fraction": self.roofline.sol_fraction,
            "findings": [f.to_dict() for f in self.findings],
            "tools_run": list(self.tools_run),
            "tools_skipped": [list(t) for t in self.tools_skipped],
        }

    def text(self) -> str:
        lines = [
            f"{self.roofline.bottleneck.value}: {self.measured_ms * 1e3:.1f} us measured, "
            f"speed of light {self.roofline.sol_ms * 1e3:.1f} us ({100 * self.roofline.sol_fraction:.0f}%)"
        ]
        for f in self.findings:
            fix = f" -> try {dict(f.suggestion)}" if f.suggestion else ""
            lines.append(
                f"  [{f.severity.value:6}] {f.tool}.{f.metric} = {f.value}: {f.guidance}{fix}"
            )
        lines += [f"  (skipped {name}: {why})" for name, why in self.tools_skipped]
        return "\n".join(lines)


def time_ms(fn: Callable[..., Any], inputs: Sequence[Any], reps: int = 50) -> float:
    """Median of `reps` CUDA-event timings after a warm-up, L2 left warm (like do_bench)."""
    import torch

    fn(*inputs)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*inputs)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def triton_kernels_of(fn: Any) -> list[Any]:
    """Compiled Triton kernels reachable from `fn` (a JITFunction, or a function whose globals
    hold JITFunctions), from Triton's per-device caches; best effort across Triton versions."""
    try:
        from triton.runtime.jit import JITFunction
    except ImportError:
        return []
    seen: list[Any] = []
    candidates = [fn] + list(getattr(fn, "__globals__", {}).values())
    for obj in candidates:
        # Autotuner/Heuristics wrap the JITFunction in .fn; a JITFunction's own .fn is the
        # plain Python function, so unwrap only until one is reached.
        for _ in range(8):
            if isinstance(obj, JITFunction) or not hasattr(obj, "fn"):
                break
            obj = obj.fn
        if not isinstance(obj, JITFunction):
            continue
        for entry in getattr(obj, "device_caches", {}).values():
            cache = entry[0] if isinstance(entry, tuple) else {}
            seen += [k for k in cache.values() if hasattr(k, "asm")]
    return seen


def profile_kernel(
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    *,
    flops: float,
    bytes: float,
    ceilings: Any,
    tools: Sequence[str] | None = None,
    knobs: Mapping[str, Any] | None = None,
    grid_size: int | None = None,
    target: ProfileTarget | None = None,
    measured_ms: float | None = None,
    budget_s: float | None = None,
) -> ProfileReport:
    """Stage 1 (roofline), then stage 2: the registered tools for that class (or `tools` by name).

    A tool that is unavailable here or fails is listed in `tools_skipped` with the reason; the
    report still comes back."""
    ms = measured_ms if measured_ms is not None else time_ms(fn, inputs)
    if target is None:
        target = ProfileTarget(fn=fn, inputs=tuple(inputs), knobs=dict(knobs or {}))
    if not target.compiled:
        target.compiled = triton_kernels_of(fn)
    roof = classify(ms, flops, bytes, ceilings, grid_size=grid_size, knobs=target.knobs)
    chosen = tools_for(roof.bottleneck, names=tools, budget_s=budget_s)
    found, ran, skipped = run_tools(chosen, target)
    return ProfileReport(ms, roof, roof.findings + found, ran, skipped)


def run_tools(
    tools: Sequence[Tool], target: ProfileTarget
) -> tuple[tuple[Finding, ...], tuple[str, ...], tuple[tuple[str, str], ...]]:
    """Run stage-2 `tools` on `target`: (findings most severe first, tools run, (tool, why)
    for each tool that is unavailable here or raised). Never raises for a tool."""
    found: list[Finding] = []
    ran: list[str] = []
    skipped: list[tuple[str, str]] = []
    for tool in tools:
        why = tool.available()
        if why:
            skipped.append((tool.name, why))
            continue
        started = time.perf_counter()
        try:
            found += tool.run(target)
            ran.append(tool.name)
        except Exception as exc:  # one failing tool must not hide the others' findings
            skipped.append((tool.name, one_line(exc)))
        target.seconds[tool.name] = time.perf_counter() - started
    found.sort(key=lambda f: _ORDER.index(f.severity))
    return tuple(found), tuple(ran), tuple(skipped)


def one_line(exc: BaseException) -> str:
    """`Type: first line of the message`, for a skipped tool's reason."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:300]
