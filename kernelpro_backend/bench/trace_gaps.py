"""Where a profiled step leaves the GPU idle: the gaps between consecutive GPU kernels of a
torch.profiler chrome trace, each with the host op that launched the kernel after it (the
innermost CPU op around its launch call) and whether the launch came after the GPU went idle
(the host was late) or before it (something else held the GPU back).

    python -m kernelpro_backend.cli.sweeps trace-gaps trace.json [--top 12] [--min-us 5]

Owns: reading a chrome trace's kernels and launches into gaps. Must not: profile or time anything
itself (the caller traces a step with torch.profiler).
"""

from __future__ import annotations

import json


def _events(path: str) -> list[dict]:
    with open(path) as f:
        data = json.load(f)
    return [e for e in data.get("traceEvents", data) if e.get("ph") == "X"]


def _launcher(launch: dict, ops: list[dict]) -> str:
    around = [o for o in ops if o["ts"] <= launch["ts"] <= o["ts"] + o.get("dur", 0)]
    return min(around, key=lambda o: o.get("dur", 0))["name"] if around else "?"


def gaps(path: str, min_us: float) -> tuple[list[dict], dict]:
    events = _events(path)
    kernels = sorted(
        (e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")),
        key=lambda e: e["ts"],
    )
    launches = {
        e["args"].get("correlation"): e
        for e in events
        if e.get("cat") == "cuda_runtime" and "args" in e
    }
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    out = []
    for prev, nxt in zip(kernels, kernels[1:], strict=False):
        idle = nxt["ts"] - (prev["ts"] + prev.get("dur", 0))
        if idle < min_us:
            continue
        launch = launches.get(nxt.get("args", {}).get("correlation"))
        row = {"idle_us": round(idle, 1), "next": nxt["name"][:60], "after": prev["name"][:40]}
        if launch is not None:
            late = launch["ts"] - (prev["ts"] + prev.get("dur", 0))
            row["launched_us_after_idle"] = round(late, 1)  # > 0: the host was late
            row["launched_by"] = _launcher(launch, ops)[:60]
        out.append(row)
    busy = sum(k.get("dur", 0) for k in kernels)
    span = (kernels[-1]["ts"] + kernels[-1].get("dur", 0) - kernels[0]["ts"]) if kernels else 0
    steps = [
        o for o in ops if o["name"].startswith("ProfilerStep") or "Compiled Region" in o["name"]
    ]
    first_op = min((o["ts"] for o in ops), default=0)
    summary = {
        "kernels": len(kernels),
        "gpu_busy_us": round(busy, 1),
        "first_to_last_kernel_us": round(span, 1),
        "idle_inside_us": round(span - busy, 1),
        "host_before_first_kernel_us": round(kernels[0]["ts"] - first_op, 1) if kernels else None,
        "compiled_regions": len(steps),
    }
    return out, summary
