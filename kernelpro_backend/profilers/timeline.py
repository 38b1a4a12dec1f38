"""The timeline tool: how many kernels one call launches and how long the GPU idles between
them, from the PyTorch profiler's CUDA activity (the GPU machine has no nsys).

Owns: `kernel_events(chrome_trace)` (kernel events from `prof.export_chrome_trace` JSON),
`timeline_findings` and `TimelineTool`.
Must not: fuse or reorder anything; it only says that a subgraph should be fused.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .findings import Bottleneck, Finding, Severity
from .target import ProfileTarget

TOOL = "timeline"
PROFILED_CALLS = 5
GAP_US = 5.0  # a gap above a launch latency (~5 us) means the CPU, not the GPU, sets the pace


@dataclasses.dataclass(frozen=True)
class KernelEvent:
    name: str
    start_us: float
    duration_us: float

    @property
    def end_us(self) -> float:
        return self.start_us + self.duration_us


def kernel_events(trace: Mapping[str, Any]) -> list[KernelEvent]:
    """GPU kernel events of a Chrome trace (torch.profiler), in start order."""
    events = [
        KernelEvent(str(e.get("name", "?")), float(e["ts"]), float(e.get("dur", 0.0)))
        for e in trace.get("traceEvents", [])
        if e.get("ph") == "X" and str(e.get("cat", "")).lower() == "kernel"
    ]
    return sorted(events, key=lambda e: e.start_us)


def timeline_findings(events: Sequence[KernelEvent], calls: int) -> list[Finding]:
    if not events:
        return [
            Finding(TOOL, "kernel_launches_per_call", 0, None, Severity.INFO, "No GPU kernel ran.")
        ]
    per_call = len(events) / max(calls, 1)
    gaps = [max(0.0, b.start_us - a.end_us) for a, b in zip(events, events[1:], strict=False)]
    busy = sum(e.duration_us for e in events)
    span = events[-1].end_us - events[0].start_us
    idle = 1 - busy / span if span > 0 else 0.0
    names = sorted({e.name[:60] for e in events})
    out = []
    if per_call > 1:
        out.append(
            Finding(
                TOOL,
                "kernel_launches_per_call",
                round(per_call, 2),
                1,
                Severity.HIGH if per_call > 3 else Severity.MEDIUM,
                f"{per_call:.0f} kernel launches per call ({', '.join(names[:4])}): each launch "
                "re-reads its inputs from memory and costs ~5 us; one fused kernel does it once.",
            )
        )
    if gaps:
        median_gap = statistics.median(gaps)
        if median_gap > GAP_US and idle > 0.3:
            out.append(
                Finding(
                    TOOL,
                    "launch_gap_us",
                    round(median_gap, 2),
                    GAP_US,
                    Severity.HIGH if idle > 0.6 else Severity.MEDIUM,
                    f"The GPU idles {100 * idle:.0f}% of the time between launches (median gap "
                    f"{median_gap:.1f} us): the host launch path sets the pace. Fewer, larger "
                    "launches or CUDA graphs remove it.",
                )
            )
    mean_us = busy / len(events)
    out.append(
        Finding(
            TOOL,
            "kernel_time_us",
            round(busy / max(calls, 1), 3),
            None,
            Severity.INFO,
            f"{len(events)} kernels over {calls} calls, mean {mean_us:.1f} us each, GPU busy "
            f"{100 * (1 - idle):.0f}% of the span.",
        )
    )
    return out


def record_trace(fn: Any, inputs: Sequence[Any], calls: int = PROFILED_CALLS) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn(*inputs)  # warm-up: compilation and autotuning stay out of the trace
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn(*inputs)
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory(prefix="kp_trace_") as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        return json.loads(path.read_text())


class TimelineTool:
    name = "timeline"
    applies_to = frozenset({Bottleneck.LATENCY, Bottleneck.UNDERUTILIZED})
    cost_s = 2.0

    def available(self) -> str | None:
        import torch

        return None if torch.cuda.is_available() else "no CUDA GPU"

    def run(self, target: ProfileTarget) -> list[Finding]:
        if target.fn is None:
            raise ValueError("the timeline tool needs ProfileTarget.fn and inputs")
        trace = record_trace(target.fn, target.inputs)
        return timeline_findings(kernel_events(trace), PROFILED_CALLS)
