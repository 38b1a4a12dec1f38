"""The energy tool: joules per call from the GPU's energy counter (NVML).

Owns: `measure_energy` (loops the call for >= 0.5 s, since the counter updates every ~20-100 ms)
and `energy_findings`, `EnergyTool`.
Must not: change clocks or power limits.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

from .findings import Bottleneck, Finding, Severity
from .target import ProfileTarget

TOOL = "energy"
MIN_SECONDS = 0.5


@dataclasses.dataclass(frozen=True)
class EnergyReading:
    joules_per_call: float
    seconds_per_call: float
    calls: int

    @property
    def watts(self) -> float:
        return self.joules_per_call / self.seconds_per_call if self.seconds_per_call else 0.0


def _nvml_handle(device_index: int) -> Any:
    import pynvml

    pynvml.nvmlInit()
    try:
        import torch

        props = torch.cuda.get_device_properties(device_index)
        domain = getattr(props, "pci_domain_id", 0)
        bus, dev = getattr(props, "pci_bus_id", None), getattr(props, "pci_device_id", 0)
        if bus is not None:
            return pynvml.nvmlDeviceGetHandleByPciBusId_v2(f"{domain:08x}:{bus:02x}:{dev:02x}.0")
    except Exception:  # older torch or NVML: fall back to the index
        pass
    return pynvml.nvmlDeviceGetHandleByIndex(device_index)


def measure_energy(
    fn: Callable[..., Any], inputs: Sequence[Any], device_index: int = 0
) -> EnergyReading:
    import pynvml
    import torch

    handle = _nvml_handle(device_index)
    fn(*inputs)
    torch.cuda.synchronize()
    batch, calls = 1, 0
    start_mj = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    start = time.perf_counter()
    while True:
        for _ in range(batch):
            fn(*inputs)
        calls += batch
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        if elapsed >= MIN_SECONDS:
            break
        batch = min(batch * 2, 4096)
    used_mj = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) - start_mj
    return EnergyReading(used_mj / 1e3 / calls, elapsed / calls, calls)


def energy_findings(reading: EnergyReading) -> list[Finding]:
    return [
        Finding(
            TOOL,
            "joules_per_call",
            reading.joules_per_call,
            None,
            Severity.INFO,
            f"{reading.joules_per_call * 1e3:.3f} mJ per call at {reading.watts:.0f} W average "
            f"({reading.calls} calls over {reading.calls * reading.seconds_per_call:.2f} s); at the "
            "same speed, fewer bytes moved and fewer launches use less energy.",
        )
    ]


class EnergyTool:
    name = "energy"
    applies_to = frozenset({Bottleneck.MEMORY, Bottleneck.COMPUTE})
    cost_s = 1.0

    def available(self) -> str | None:
        try:
            import pynvml
            import torch

            if not torch.cuda.is_available():
                return "no CUDA GPU"
            pynvml.nvmlInit()
            return None
        except Exception as exc:
            return f"NVML unavailable: {exc}"

    def run(self, target: ProfileTarget) -> list[Finding]:
        if target.fn is None:
            raise ValueError("the energy tool needs ProfileTarget.fn and inputs")
        return energy_findings(measure_energy(target.fn, target.inputs))
