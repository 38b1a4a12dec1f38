"""The Nsight Compute rules: judge one profiled launch's counters.

Owns: `ncu_findings(launch, knobs)`: throughput vs roofs, occupancy and its limiter, waves,
coalescing, bank conflicts, cache hit rates, warp stalls, tensor-pipe use.
Must not: run ncu (ncu.py does) or parse its CSV (ncu_metrics.py does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .findings import Finding, Severity
from .ncu_metrics import STALL_REASONS, NcuLaunch, stall_metric
from .suggest import (
    fewer_registers,
    less_shared_memory,
    more_latency_hiding,
    more_programs,
    wider_loads,
)

TOOL = "ncu"


def _f(
    metric: str, value: float, threshold: float | None, severity: Severity, guidance: str, **s: Any
) -> Finding:
    return Finding(
        TOOL, metric, round(value, 3), threshold, severity, guidance, tuple(sorted(s.items()))
    )


def _occupancy(m: NcuLaunch, knobs: Mapping[str, Any]) -> list[Finding]:
    out = []
    theoretical = m.get("sm__maximum_warps_per_active_cycle_pct")
    achieved = m.get("sm__warps_active.avg.pct_of_peak_sustained_active")
    limits = {
        "registers": m.get("launch__occupancy_limit_registers"),
        "shared memory": m.get("launch__occupancy_limit_shared_mem"),
        "blocks per SM": m.get("launch__occupancy_limit_blocks"),
        "warps per SM": m.get("launch__occupancy_limit_warps"),
    }
    known = {k: v for k, v in limits.items() if v is not None}
    limiter = min(known, key=lambda k: known[k]) if known else "unknown"
    if theoretical is not None and theoretical < 50:
        fix: dict[str, Any] = {}
        if limiter == "registers":
            fix = fewer_registers(knobs)
        elif limiter == "shared memory":
            fix = less_shared_memory(knobs)
        elif limiter == "blocks per SM":
            fix = {"num_warps": max(4, 2 * int(knobs.get("num_warps", 2)))}
        regs = m.get("launch__registers_per_thread")
        out.append(
            _f(
                "theoretical_occupancy_pct",
                theoretical,
                50.0,
                Severity.HIGH if theoretical < 25 else Severity.MEDIUM,
                f"At most {theoretical:.0f}% of warp slots can be used; the limiter is {limiter}"
                + (f" ({regs:.0f} registers/thread)" if limiter == "registers" and regs else "")
                + ". Fewer warps in flight hide less memory latency.",
                **fix,
            )
        )
    if theoretical and achieved is not None and achieved < 0.6 * theoretical:
        out.append(
            _f(
                "achieved_occupancy_pct",
                achieved,
                round(0.6 * theoretical, 1),
                Severity.MEDIUM,
                f"Achieved occupancy {achieved:.0f}% is far below the theoretical {theoretical:.0f}%: "
                "programs finish unevenly or the grid does not fill the SMs (tail effect).",
            )
        )
    return out


def _waves(m: NcuLaunch, knobs: Mapping[str, Any]) -> list[Finding]:
    waves = m.get("launch__waves_per_multiprocessor")
    grid = m.get("launch__grid_size")
    sms = m.get("device__attribute_multiprocessor_count") or 132
    if waves is None or grid is None:
        return []
    if grid < sms:
        return [
            _f(
                "waves_per_sm",
                waves,
                1.0,
                Severity.HIGH,
                f"Grid of {grid:.0f} programs for {sms:.0f} SMs ({waves:.2f} waves): "
                f"{100 * (1 - grid / sms):.0f}% of the SMs have nothing to do. Give each program "
                "less work (smaller tile, fewer rows per program) or split the reduction axis.",
                **more_programs(knobs, int(grid), int(sms)),
            )
        ]
    tail = waves - int(waves)
    if 1 <= waves < 4 and 0 < tail < 0.5:
        return [
            _f(
                "waves_per_sm",
                waves,
                None,
                Severity.LOW,
                f"{waves:.2f} waves: the last partial wave leaves SMs idle for ~"
                f"{100 * (1 - tail) / (int(waves) + 1):.0f}% of the run; a tile size that gives a "
                "whole number of waves, or a persistent kernel, removes the tail.",
            )
        ]
    return []


def _coalescing(m: NcuLaunch, knobs: Mapping[str, Any], element_bytes: int) -> list[Finding]:
    out = []
    for op, name in (("ld", "loads"), ("st", "stores")):
        sectors = m.get(f"l1tex__t_sectors_pipe_lsu_mem_global_op_{op}.sum")
        requests = m.get(f"l1tex__t_requests_pipe_lsu_mem_global_op_{op}.sum")
        if not sectors or not requests:
            continue
        per_request = sectors / requests
        # A warp of 32 threads reading 4..16 contiguous bytes each touches 4..16 sectors of
        # 32 B; more than 16 sectors per request means threads read scattered addresses.
        if per_request > 16:
            out.append(
                _f(
                    f"global_{op}_sectors_per_request",
                    per_request,
                    16.0,
                    Severity.HIGH,
                    f"Uncoalesced global {name}: {per_request:.1f} sectors of 32 B per warp request "
                    f"(coalesced is 4 for 4-byte, 16 for 16-byte accesses). Neighbouring threads "
                    "touch addresses far apart (strided or transposed access): map the contiguous "
                    "axis to consecutive threads and load it with vector accesses.",
                    **wider_loads(knobs, element_bytes),
                )
            )
    efficiency = m.get("smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct")
    # The ratio is over LSU global loads only. On the H100 it read 0% for every cuBLAS GEMM and
    # the attention kernel of the example block (2026-11-23 profile), whose operands arrive by
    # TMA / cp.async instead: without LSU load requests it is no data, not 0% of bytes used.
    # It still read 0% for a cuBLAS GEMM that issued some LSU loads (second profile, same day):
    # an LSU load always uses some bytes of its sector, so exactly 0% is no data either.
    lsu_loads = m.get("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum")
    if efficiency and 0 < efficiency < 50 and lsu_loads and not out:
        out.append(
            _f(
                "global_ld_bytes_used_per_sector_pct",
                efficiency,
                50.0,
                Severity.MEDIUM,
                f"Only {efficiency:.0f}% of each 32-byte sector loaded from memory is used: "
                "accesses are partly scattered; make the contiguous axis the fastest-moving one.",
                **wider_loads(knobs, element_bytes),
            )
        )
    return out


def _memory_system(m: NcuLaunch, knobs: Mapping[str, Any]) -> list[Finding]:
    out = []
    conflicts = m.get("l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum")
    wavefronts = m.get("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum")
    if conflicts and wavefronts and conflicts / wavefronts > 0.1:
        ratio = conflicts / wavefronts
        out.append(
            _f(
                "shared_bank_conflict_ratio",
                ratio,
                0.1,
                Severity.HIGH if ratio > 0.5 else Severity.MEDIUM,
                f"{100 * ratio:.0f}% of shared-memory wavefronts are bank-conflict replays: pad or "
                "swizzle the shared tile, or change the vector width of shared accesses.",
            )
        )
    l2_hit = m.get("lts__t_sector_hit_rate.pct")
    if l2_hit is not None and l2_hit < 50 and "BLOCK_K" in knobs:
        group = knobs.get("GROUP_M")
        fix = {"GROUP_M": 8} if not isinstance(group, int) or group < 8 else {}
        out.append(
            _f(
                "l2_hit_rate_pct",
                l2_hit,
                50.0,
                Severity.MEDIUM,
                f"L2 hit rate {l2_hit:.0f}% for a tiled kernel: tiles that share operands run far "
                "apart in time; group programs along M so that they reuse the same B columns.",
                **fix,
            )
        )
    return out


def _throughput(m: NcuLaunch) -> list[Finding]:
    dram = m.get("dram__throughput.avg.pct_of_peak_sustained_elapsed")
    sm = m.get("sm__throughput.avg.pct_of_peak_sustained_elapsed")
    if dram is None or sm is None:
        return []
    if max(dram, sm) >= 70:
        unit = "DRAM" if dram >= sm else "SM"
        return [
            _f(
                f"{unit.lower()}_throughput_pct",
                max(dram, sm),
                70.0,
                Severity.INFO,
                f"{unit} throughput at {max(dram, sm):.0f}% of peak: the kernel runs at its roof; "
                "gains now come from moving fewer bytes or doing less work.",
            )
        ]
    return [
        _f(
            "dram_throughput_pct",
            dram,
            70.0,
            Severity.MEDIUM if max(dram, sm) < 40 else Severity.LOW,
            f"Neither memory ({dram:.0f}%) nor SMs ({sm:.0f}%) are busy: the kernel waits on "
            "latency (too few warps or loads in flight, a small grid, or serial dependencies).",
        )
    ]


_STALL_ADVICE = {
    "long_scoreboard": "waiting on global memory: keep more loads in flight",
    "short_scoreboard": "waiting on shared memory or special functions (exp, rsqrt)",
    "wait": "fixed-latency dependencies between back-to-back instructions: more independent work per thread",
    "barrier": "waiting at block barriers: fewer warps per block or less synchronisation",
    "mio_throttle": "shared-memory instruction queue is full: wider shared accesses",
    "lg_throttle": "global/local instruction queue is full of narrow accesses: use 16-byte vector accesses",
    "math_pipe_throttle": "a math pipe is saturated: compute-bound on that pipe",
    "no_instruction": "instruction cache misses: the unrolled body is too large",
    "membar": "memory barriers: avoid fences/atomics in the hot loop",
}


def _stalls(m: NcuLaunch, knobs: Mapping[str, Any], element_bytes: int) -> list[Finding]:
    stalls = {r: m.get(stall_metric(r)) for r in STALL_REASONS}
    known = {r: v for r, v in stalls.items() if v is not None and r != "not_selected"}
    total = sum(known.values())
    if not known or total <= 0:
        return []
    reason = max(known, key=lambda r: known[r])
    share = known[reason] / total
    if share < 0.4 or reason not in _STALL_ADVICE:
        return []
    fix: dict[str, Any] = {}
    if reason == "long_scoreboard":
        fix = more_latency_hiding(knobs)
    elif reason in ("lg_throttle", "mio_throttle"):
        fix = wider_loads(knobs, element_bytes)
    elif reason == "barrier":
        warps = knobs.get("num_warps")
        fix = {"num_warps": warps // 2} if isinstance(warps, int) and warps > 2 else {}
    elif reason == "no_instruction":
        stages = knobs.get("num_stages")
        fix = {"num_stages": stages - 1} if isinstance(stages, int) and stages > 2 else {}
    dram = m.get("dram__throughput.avg.pct_of_peak_sustained_elapsed") or 0.0
    at_roof = dram >= 70 and reason == "long_scoreboard"
    return [
        _f(
            f"stall_{reason}",
            known[reason],
            None,
            Severity.LOW if at_roof else (Severity.HIGH if share > 0.6 else Severity.MEDIUM),
            f"Warps mostly stall on {reason} ({100 * share:.0f}% of stall cycles, "
            f"{known[reason]:.1f} cycles per issued instruction): {_STALL_ADVICE[reason]}.",
            **({} if at_roof else fix),
        )
    ]


def _tensor_pipe(m: NcuLaunch, knobs: Mapping[str, Any]) -> list[Finding]:
    if "BLOCK_K" not in knobs:  # only matmul-like templates can use tensor cores
        return []
    pipes = [
        m.get("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"),
        m.get("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"),
    ]
    known = [p for p in pipes if p is not None]
    if not known:
        return []
    busiest = max(known)
    if busiest >= 50:
        return []
    return [
        _f(
            "tensor_pipe_pct",
            busiest,
            50.0,
            Severity.HIGH if busiest < 5 else Severity.MEDIUM,
            f"Tensor pipes busy {busiest:.0f}% of active cycles in a matmul kernel: "
            + (
                "tensor cores are not used (check dtype/precision and tile shapes >= 16)."
                if busiest < 5
                else "feed them faster: deeper software pipeline, larger tiles."
            ),
            **({} if busiest < 5 else more_latency_hiding(knobs)),
        )
    ]


def ncu_findings(
    launch: NcuLaunch, knobs: Mapping[str, Any] | None = None, *, element_bytes: int = 4
) -> list[Finding]:
    """Findings for one profiled launch, most severe first. Metrics ncu lacked are skipped."""
    knobs = knobs or {}
    found = [
        *_throughput(launch),
        *_waves(launch, knobs),
        *_occupancy(launch, knobs),
        *_coalescing(launch, knobs, element_bytes),
        *_memory_system(launch, knobs),
        *_stalls(launch, knobs, element_bytes),
        *_tensor_pipe(launch, knobs),
    ]
    order = [Severity.HIGH, Severity.MEDIUM, Severity.LOW, Severity.INFO]
    return sorted(found, key=lambda f: order.index(f.severity))
