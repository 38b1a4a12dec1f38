"""Running a validated kernel under the energy meter: joules per call for the worker's result.

Owns: `kernel_energy` — the kernel run back to back (CUDA-graph replays where its timing
replayed graphs, so a short kernel's figure is the GPU's, not its host launches' with the GPU
idling between them) for profilers/energy.py's `measure_loop`, and the reading as the details
a result carries.
Must not: time or check kernels (timing.py, validate.py), or change clocks or power limits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..profilers.energy import EnergyMeter, EnergyReading, NvmlMeter, batch_calls, measure_loop
from .timing import Timing, _calls, _capture


def kernel_energy(
    fn: Callable[..., Any],
    inputs: Sequence[torch.Tensor],
    device: torch.device,
    timing: Timing,
    meter: EnergyMeter | None = None,
) -> EnergyReading | None:
    """Joules per call of `fn(*inputs)`, which `timing` timed; None off CUDA or without
    NVML. The loop starts at once after the timing: the GPU's clocks are already up."""
    if device.type != "cuda":
        return None
    meter = meter or NvmlMeter.open(device.index or 0)
    if meter is None:
        return None
    with torch.no_grad():
        run = _replaying(fn, inputs, device, timing) if "cuda_graph" in timing.method else None
        if run is None:
            batch = batch_calls(timing.median_ms / 1e3)

            def run() -> int:
                for _ in range(batch):
                    fn(*inputs)
                torch.cuda.synchronize(device)
                return batch

        return measure_loop(run, meter)


def _replaying(
    fn: Callable[..., Any], inputs: Sequence[torch.Tensor], device: torch.device, timing: Timing
) -> Callable[[], int] | None:
    """A batch of replays of a CUDA graph of `fn`'s calls; None if it cannot be captured."""
    calls = _calls(timing.median_ms)
    try:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):  # warm-up on a side stream, as capture requires
            fn(*inputs)
        torch.cuda.current_stream(device).wait_stream(side)
        graph = _capture(fn, [inputs], calls)
    except Exception:  # the timing captured it with other input sets; here, direct calls
        torch.cuda.synchronize(device)
        return None
    replays = batch_calls(timing.median_ms * calls / 1e3)

    def run() -> int:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize(device)
        return replays * calls

    return run
