"""Stage 1 of the feedback: the roofline classifier.

Owns: `Roofs` (the device roofs as plain numbers; H100 defaults where none are measured),
`RooflineReport` and `classify`, which
turns a measured time plus the FLOPs and bytes of a subgraph into a bottleneck class, the
speed-of-light time and a Finding with guidance.
Must not: measure anything or compute FLOPs/bytes of a subgraph (speed_of_light does that);
it takes them as numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from .findings import Bottleneck, Finding, Severity
from .suggest import more_programs

# A kernel launch costs ~3-5 us of host + front-end time on H100; a kernel that runs for
# under ~2x that is dominated by the launch, whatever its roofline says.
DEFAULT_LAUNCH_LATENCY_MS = 0.005
NEAR_ROOF = 0.6  # at >= 60% of SOL the kernel is on its roof: name the roof
UNDER_UTILISED = 0.25  # below 25% of SOL with no latency cause: occupancy/stalls/spills
# H100 SXM roofs where none are measured (GPU.md): ~3.0 TB/s copy; dense peaks per dtype
# (bf16/fp16 measured ~800 TFLOP/s; fp32 at "highest" precision runs on CUDA cores: 132 SMs x
# 128 x 2 x 1.98 GHz).
DEFAULT_BYTES_PER_S = 3.0e12
DEFAULT_FLOPS_PER_S = {"float32": 67e12, "bfloat16": 800e12, "float16": 800e12}


@dataclasses.dataclass(frozen=True)
class Roofs:
    """The roofs of one device for one dtype: sustained bytes/s (read+write counted) and FLOP/s."""

    bytes_per_s: float
    flops_per_s: float
    launch_latency_ms: float = DEFAULT_LAUNCH_LATENCY_MS
    sm_count: int = 132

    @classmethod
    def of(cls, obj: Any) -> Roofs:
        """Accept a Roofs, a mapping, or any object with `bytes_per_s` and `flops_per_s`
        attributes (e.g. the speed-of-light model's ceilings)."""
        if isinstance(obj, Roofs):
            return obj
        get = obj.get if isinstance(obj, Mapping) else lambda k, d=None: getattr(obj, k, d)
        bytes_per_s, flops_per_s = get("bytes_per_s"), get("flops_per_s")
        if not bytes_per_s or not flops_per_s:
            raise ValueError(
                f"ceilings need positive bytes_per_s and flops_per_s, got {obj!r}: "
                "pass the device's measured copy bandwidth and peak FLOP/s for the dtype"
            )
        return cls(
            bytes_per_s=float(bytes_per_s),
            flops_per_s=float(flops_per_s),
            launch_latency_ms=float(get("launch_latency_ms", DEFAULT_LAUNCH_LATENCY_MS)),
            sm_count=int(get("sm_count", 132)),
        )


@dataclasses.dataclass(frozen=True)
class RooflineReport:
    bottleneck: Bottleneck
    sol_ms: float  # max(bytes / bandwidth, flops / peak), the time no kernel can beat
    sol_fraction: float  # sol_ms / measured_ms: 1.0 is on the roof
    memory_ms: float
    compute_ms: float
    findings: tuple[Finding, ...]


def _severity_for(fraction: float) -> Severity:
    if fraction < 0.3:
        return Severity.HIGH
    if fraction < NEAR_ROOF:
        return Severity.MEDIUM
    if fraction < 0.85:
        return Severity.LOW
    return Severity.INFO


def _us(ms: float) -> str:
    """A time in microseconds with enough digits for sub-microsecond bounds."""
    us = ms * 1e3
    return f"{us:.1f} us" if us >= 1 else f"{us:.2g} us"


def classify(
    measured_ms: float,
    flops: float,
    bytes: float,
    ceilings: Any,
    *,
    grid_size: int | None = None,
    knobs: Mapping[str, Any] | None = None,
) -> RooflineReport:
    """Classify one kernel (or subgraph) time against the device roofs.

    `grid_size` (programs launched), when known, lets a tiny grid count as latency-bound;
    `knobs` (the candidate's KernelSpec knobs) lets the suggestion name concrete values."""
    if measured_ms <= 0:
        raise ValueError(f"measured_ms must be positive, got {measured_ms}: time the kernel first")
    roofs = Roofs.of(ceilings)
    memory_ms = 1e3 * max(bytes, 0.0) / roofs.bytes_per_s
    compute_ms = 1e3 * max(flops, 0.0) / roofs.flops_per_s
    sol_ms = max(memory_ms, compute_ms)
    fraction = sol_ms / measured_ms
    roof = Bottleneck.MEMORY if memory_ms >= compute_ms else Bottleneck.COMPUTE
    pct = f"{100 * fraction:.0f}% of speed of light ({_us(measured_ms)} vs {_us(sol_ms)})"
    few_programs = grid_size is not None and grid_size < roofs.sm_count
    bottleneck, severity, guidance = _verdict(
        fraction, roof, pct, measured_ms, sol_ms, roofs, grid_size if few_programs else None
    )
    suggestion: dict[str, Any] = {}
    if bottleneck is Bottleneck.LATENCY and few_programs and fraction < NEAR_ROOF:
        suggestion = more_programs(knobs or {}, grid_size or 1, roofs.sm_count)
    findings = (
        Finding(
            tool="roofline",
            metric="bottleneck",
            value=bottleneck.value,
            threshold=None,
            severity=severity,
            guidance=guidance,
            suggestion=tuple(sorted(suggestion.items())),
        ),
        Finding(
            tool="roofline",
            metric="sol_fraction",
            value=round(fraction, 4),
            threshold=NEAR_ROOF,
            severity=severity,
            guidance=f"{pct}; memory roof {_us(memory_ms)}, compute roof {_us(compute_ms)}.",
        ),
    )
    return RooflineReport(bottleneck, sol_ms, fraction, memory_ms, compute_ms, findings)


def _verdict(
    fraction: float,
    roof: Bottleneck,
    pct: str,
    measured_ms: float,
    sol_ms: float,
    roofs: Roofs,
    grid_size: int | None,
) -> tuple[Bottleneck, Severity, str]:
    """The class, severity and guidance for a kernel at `fraction` of speed of light;
    `grid_size`: set only when the grid has fewer programs than the GPU has SMs."""
    if fraction > 1.05:
        bottleneck, severity = roof, Severity.HIGH
        guidance = (
            f"Measured faster than speed of light ({pct}): the timing, the FLOP/byte count or "
            "the output is wrong. Treat it as a bug, not a win."
        )
    elif fraction >= NEAR_ROOF:
        bottleneck, severity = roof, _severity_for(fraction)
        what = "DRAM bandwidth" if roof is Bottleneck.MEMORY else "peak math throughput"
        guidance = (
            f"{roof.value} at {pct}: the kernel is on the {what} roof; only moving fewer bytes "
            "(fusing, narrower dtypes) or fewer FLOPs can make it much faster."
        )
    elif grid_size is not None:  # fewer programs than SMs
        bottleneck, severity = Bottleneck.LATENCY, Severity.HIGH
        guidance = (
            f"latency-bound: {grid_size} programs for {roofs.sm_count} SMs leaves "
            f"{100 * (1 - grid_size / roofs.sm_count):.0f}% of SMs idle ({pct}); give each program "
            "less work or split the reduction axis so that the grid fills the GPU."
        )
    elif measured_ms < 2 * roofs.launch_latency_ms:
        bottleneck, severity = Bottleneck.LATENCY, _severity_for(fraction)
        guidance = (
            f"latency-bound: {measured_ms * 1e3:.1f} us is within 2x of the ~"
            f"{roofs.launch_latency_ms * 1e3:.0f} us launch latency ({pct}); fuse it with its "
            "neighbours or batch launches (CUDA graphs) rather than tuning the kernel."
        )
    elif sol_ms < roofs.launch_latency_ms:
        bottleneck, severity = Bottleneck.LATENCY, Severity.HIGH
        guidance = (
            f"latency-bound: at speed of light the work takes {_us(sol_ms)}, less than one "
            f"~{roofs.launch_latency_ms * 1e3:.0f} us launch, so the {_us(measured_ms)} measured "
            "is launch and host overhead; fuse it with its neighbours into fewer launches "
            "(or CUDA graphs) rather than tuning the kernel."
        )
    elif fraction < UNDER_UTILISED:
        bottleneck, severity = Bottleneck.UNDERUTILIZED, Severity.HIGH
        guidance = (
            f"under-utilised: {pct}, far from both the memory and the compute roof without a "
            "launch or grid-size cause; look at occupancy, warp stalls, spills and access width."
        )
    else:
        bottleneck, severity = roof, _severity_for(fraction)
        guidance = (
            f"{roof.value} at {pct}: the {'memory' if roof is Bottleneck.MEMORY else 'math'} "
            "roof limits it but it is not there yet; check access width/coalescing "
            + ("and the memory pipeline." if roof is Bottleneck.MEMORY else "and tensor-core use.")
        )
    return bottleneck, severity, guidance
