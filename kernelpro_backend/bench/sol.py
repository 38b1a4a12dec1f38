"""Speed of light of a bench workload, and its subgraphs as points on the roofline.

Owns: finding a workload's subgraphs (forward and backward) the way the backend cuts them,
`workload_sol_ms` (the sum of their speed-of-light times, plus the optimizer's memory traffic
for a training step) and `subgraph_points` (each subgraph's FLOPs, bytes and the time of its
eager reference as runtime/timing.py's `time_kernel` measures kernels, for the roofline chart), `sol_hooks`, which gives the runner both, and
`roofs_of` (the device's measured ceilings in the units the report and chart use).
Must not: time modes or render anything.

The SOL is at kernelpro's granularity: a kernel per subgraph that moves only its inputs and
outputs at the measured DRAM bandwidth (or does its FLOPs at the measured peak). Fusing across
subgraphs could beat it; no kernel kernelpro emits can.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from .results import SubgraphPoint
from .workload import Workload

log = logging.getLogger("kernelpro.bench")

# AdamW per parameter element: reads param, grad, exp_avg, exp_avg_sq; writes param, exp_avg,
# exp_avg_sq.
ADAMW_ACCESSES = 7
MAX_POINTS = 64  # subgraphs timed per workload for the roofline chart
POINT_BUDGET_S = 0.02  # timing each of them: 64 x 20 ms, about a second per workload


def workload_subgraphs(workload: Workload) -> list[Any]:
    """The subgraphs the backend cuts from one call (and backward) of the workload's model."""
    from ..explain import find_subgraphs

    torch._dynamo.reset()
    try:
        found = find_subgraphs(workload.model, *workload.inputs, train=workload.training)
    finally:
        torch._dynamo.reset()
    return [sg for sg in found if not sg.symbolic]


def optimizer_bytes(workload: Workload) -> int:
    """Memory an AdamW step moves (0 for inference and for workloads without an optimizer)."""
    if workload.loss_fn is None or workload.make_optimizer is None:
        return 0
    params = workload.fresh_model().parameters()
    return ADAMW_ACCESSES * sum(p.numel() * p.element_size() for p in params if p.requires_grad)


def workload_sol_ms(workload: Workload, subgraphs: list[Any], ceilings: Any) -> float:
    from ..profilers.speed_of_light import SpeedOfLight

    total = sum(SpeedOfLight.for_subgraph(sg, ceilings)[2] for sg in subgraphs)
    return total + 1e3 * optimizer_bytes(workload) / ceilings.dram_bytes_per_s


def subgraph_points(subgraphs: list[Any], device: torch.device) -> list[SubgraphPoint]:
    """FLOPs, bytes and the eager reference's time of each subgraph (at most MAX_POINTS)."""
    from ..profilers.speed_of_light import SpeedOfLight
    from ..runtime.timing import time_kernel

    points = []
    for i, sg in enumerate(subgraphs[:MAX_POINTS]):
        work = SpeedOfLight.work(sg)
        module, inputs = sg.module(), sg.make_inputs(0, device)

        ms = time_kernel(module, [inputs], device, budget_s=POINT_BUDGET_S).median_ms
        points.append(SubgraphPoint(f"{i}:{sg.graph[0]}:{sg.pattern}", work.flops, work.bytes, ms))
    return points


def sol_hooks(
    ceilings: Any,
) -> tuple[Callable[[Workload], float | None], Callable[[Workload], list[SubgraphPoint]]]:
    """(sol_fn, subgraph_fn) for RunConfig. The subgraphs of a workload are found once and
    shared by both; a failure is logged and leaves that workload without SOL or points."""
    memo: dict[int, list[Any] | None] = {}

    def subgraphs_of(workload: Workload) -> list[Any] | None:
        key = id(workload)
        if key not in memo:
            try:
                memo.clear()  # one workload at a time: full-size subgraphs hold example inputs
                memo[key] = workload_subgraphs(workload)
            except Exception:
                log.warning(
                    "bench: finding the subgraphs of %s failed", workload.name, exc_info=True
                )
                memo[key] = None
        return memo[key]

    def sol_fn(workload: Workload) -> float | None:
        found = subgraphs_of(workload)
        return workload_sol_ms(workload, found, ceilings) if found else None

    def subgraph_fn(workload: Workload) -> list[SubgraphPoint]:
        found = subgraphs_of(workload)
        if not found:
            return []
        try:
            return subgraph_points(found, workload.device)
        except Exception:
            log.warning("bench: timing the subgraphs of %s failed", workload.name, exc_info=True)
            return []

    return sol_fn, subgraph_fn


def device_sol_hooks(
    device: torch.device,
) -> tuple[
    Callable[[Workload], float | None] | None, Callable[[Workload], list[SubgraphPoint]] | None
]:
    """Hooks with this CUDA device's measured ceilings; (None, None) on the CPU, which has no
    measured roofs."""
    ceilings = _device_ceilings(device)
    return (None, None) if ceilings is None else sol_hooks(ceilings)


def _device_ceilings(device: torch.device) -> Any:
    """This CUDA device's measured ceilings (measured once, then cached on disk); None on the
    CPU."""
    if device.type != "cuda":
        return None
    from ..profilers.ceilings import Ceilings

    return Ceilings.load_or_measure(device)


def roofs_of(ceilings: Any) -> dict[str, float]:
    """A Ceilings object (or its dict) as the report's roofs: TB/s and TFLOP/s."""

    def get(key: str) -> float:
        return float(ceilings[key] if isinstance(ceilings, dict) else getattr(ceilings, key))

    return {
        "dram_tb_per_s": get("dram_bytes_per_s") / 1e12,
        "fp32_tflops": get("fp32_flops_per_s") / 1e12,
        "tf32_tflops": get("tf32_flops_per_s") / 1e12,
        "bf16_tflops": get("bf16_flops_per_s") / 1e12,
    }


def device_roofs(device: torch.device) -> dict[str, float]:
    """This CUDA device's measured roofs; {} on the CPU."""
    ceilings = _device_ceilings(device)
    return {} if ceilings is None else roofs_of(ceilings)
