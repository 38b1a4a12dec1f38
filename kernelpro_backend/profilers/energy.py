"""The energy figure: joules per call from the GPU's energy counter (NVML), and the power cap.

Owns: `EnergyMeter` (what is read: the total-energy counter in mJ, the power draw, the enforced
and default power limits) and `NvmlMeter` (NVML through `pynvml`, imported lazily: absent off
the GPU; tests pass a fake meter); `measure_loop`, the arithmetic of joules per call (a
workload run in batches for at least MIN_SECONDS, the energy counted between the counter's
update edges, idle power read before and reported beside); `EnergyReading`; `PowerCap` and
`power_cap`; `energy_findings` and `EnergyTool`.
Must not: change clocks or power limits (it only reads them), or import runtime.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .findings import Bottleneck, Finding, Severity
from .target import ProfileTarget

TOOL = "energy"
# The counter (mJ since the driver loaded) moves in steps every ~20-100 ms: a reading counts
# from one step to another at least MIN_SECONDS later, so neither end of the window loses up
# to a step's energy (at 100 ms steps over 0.2 s counted from the loop's start: up to -50%).
MIN_SECONDS = 0.2
MAX_SECONDS = 2.0  # a counter that has not stepped twice by then: the whole window, unaligned
BATCH_SECONDS = 0.005  # calls run (and waited for) between two reads of the counter


class EnergyMeter(Protocol):
    """What the energy figure reads; every method returns None when the device cannot say."""

    def energy_mj(self) -> int | None:
        """The total-energy counter, in mJ (monotonic while the driver stays loaded)."""
        ...

    def power_w(self) -> float | None:
        """The board's power draw now (NVML averages it over ~1 s), in W."""
        ...

    def limits_w(self) -> tuple[float | None, float | None]:
        """(enforced power limit, default power limit), in W."""
        ...


@dataclasses.dataclass(frozen=True)
class EnergyReading:
    joules_per_call: float
    seconds_per_call: float
    calls: int
    idle_watts: float | None = None  # the draw read before the loop (None: not read)
    window_s: float = 0.0  # seconds between the first and last counter step counted
    aligned: bool = True  # False: the counter stepped < 2 times; the whole window was counted

    @property
    def watts(self) -> float:
        return self.joules_per_call / self.seconds_per_call if self.seconds_per_call else 0.0

    @property
    def dynamic_joules_per_call(self) -> float | None:
        """Joules per call above the idle draw over the call's time (None: idle not read)."""
        if self.idle_watts is None:
            return None
        return max(0.0, self.joules_per_call - self.idle_watts * self.seconds_per_call)

    def to_dict(self) -> dict[str, Any]:
        """The record a worker result and a search log carry (J, W, s, rounded to 4 digits)."""
        dynamic = self.dynamic_joules_per_call
        return {
            "j": float(f"{self.joules_per_call:.4g}"),
            "dynamic_j": None if dynamic is None else float(f"{dynamic:.4g}"),
            "watts": round(self.watts, 1),
            "idle_w": None if self.idle_watts is None else round(self.idle_watts, 1),
            "calls": self.calls,
            "window_s": round(self.window_s, 3),
            "aligned": self.aligned,
        }


def batch_calls(call_s: float, batch_s: float = BATCH_SECONDS) -> int:
    """Calls per batch: about `batch_s` of them, at least one."""
    return max(1, int(batch_s / call_s)) if call_s > 0 else 1


def measure_loop(
    run: Callable[[], int],
    meter: EnergyMeter,
    *,
    min_s: float = MIN_SECONDS,
    max_s: float = MAX_SECONDS,
    clock: Callable[[], float] = time.perf_counter,
) -> EnergyReading | None:
    """Joules per call of `run` (runs a batch of calls, waits for them, returns how many) run
    over and over, counted from the counter's first step to its first step at least `min_s`
    later (calls counted between the same two reads: exact to a batch at either end); past
    `max_s` with fewer than two steps, the whole window, marked unaligned. None: the counter cannot be read, went backwards (a driver reload; the
    64-bit mJ counter itself wraps after 584 million years) or never moved."""
    idle_w = meter.power_w()
    start_mj = meter.energy_mj()
    if start_mj is None:
        return None
    last = start_mj
    start, calls = clock(), 0
    edges: list[tuple[int, int, float]] = []  # (calls done, counter, time) at each step seen
    while True:
        calls += run()
        now, mj = clock(), meter.energy_mj()
        if mj is None or mj < last:
            return None
        if mj != last:
            edges.append((calls, mj, now))
            last = mj
        if (len(edges) >= 2 and edges[-1][2] - edges[0][2] >= min_s) or now - start >= max_s:
            break
    if len(edges) >= 2:
        (c0, e0, t0), (c1, e1, t1) = edges[0], edges[-1]
        return EnergyReading((e1 - e0) / 1e3 / (c1 - c0), (t1 - t0) / (c1 - c0), c1 - c0,
                             idle_w, t1 - t0)  # fmt: skip
    if last == start_mj or calls == 0:
        return None
    return EnergyReading(
        (last - start_mj) / 1e3 / calls, (now - start) / calls, calls, idle_w, now - start, False
    )


@dataclasses.dataclass(frozen=True)
class PowerCap:
    enforced_w: float
    default_w: float | None

    @property
    def capped(self) -> bool:
        """Below the board's default limit by more than a watt (an admin or a cloud set it)."""
        return self.default_w is not None and self.enforced_w < self.default_w - 1.0

    def note(self) -> str:
        if self.capped:
            return f"power-capped: {self.enforced_w:.0f} W enforced of {self.default_w:.0f} W"
        return f"power limit {self.enforced_w:.0f} W (the default)"

    def to_dict(self) -> dict[str, Any]:
        return {"enforced_w": self.enforced_w, "default_w": self.default_w,
                "capped": self.capped, "note": self.note()}  # fmt: skip


def power_cap(meter: EnergyMeter | None) -> PowerCap | None:
    """The enforced power limit beside the default one; None where it cannot be read."""
    if meter is None:
        return None
    enforced, default = meter.limits_w()
    return None if enforced is None else PowerCap(enforced, default)


class NvmlMeter:
    """`EnergyMeter` over NVML for one CUDA device (each read that fails returns None)."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    @classmethod
    def open(cls, device_index: int = 0) -> NvmlMeter | None:
        """The meter of CUDA device `device_index`; None without pynvml or NVML."""
        try:
            return cls(_nvml_handle(device_index))
        except Exception:  # no pynvml (CPU images), no driver, no such device
            return None

    def _read(self, name: str) -> Any:
        import pynvml

        read = getattr(pynvml, name, None)
        if read is None:  # an older NVML binding: the figure is missing, not an error
            return None
        try:
            return read(self.handle)
        except pynvml.NVMLError:
            return None

    def energy_mj(self) -> int | None:
        value = self._read("nvmlDeviceGetTotalEnergyConsumption")
        return None if value is None else int(value)

    def power_w(self) -> float | None:
        mw = self._read("nvmlDeviceGetPowerUsage")
        return None if mw is None else mw / 1e3

    def limits_w(self) -> tuple[float | None, float | None]:
        enforced = self._read("nvmlDeviceGetEnforcedPowerLimit")
        default = self._read("nvmlDeviceGetPowerManagementDefaultLimit")
        return (None if enforced is None else enforced / 1e3,
                None if default is None else default / 1e3)  # fmt: skip


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
) -> EnergyReading | None:
    """Joules per call of `fn(*inputs)` on CUDA device `device_index`, launched from Python
    (runtime/energy.py replays CUDA graphs for short kernels); None without NVML."""
    import torch

    meter = NvmlMeter.open(device_index)
    if meter is None:
        return None
    fn(*inputs)
    torch.cuda.synchronize(device_index)
    start = time.perf_counter()
    fn(*inputs)
    torch.cuda.synchronize(device_index)
    batch = batch_calls(time.perf_counter() - start)

    def run() -> int:
        for _ in range(batch):
            fn(*inputs)
        torch.cuda.synchronize(device_index)
        return batch

    return measure_loop(run, meter)


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
        reading = measure_energy(target.fn, target.inputs)
        if reading is None:
            raise RuntimeError("the NVML energy counter could not be read (see nvidia-smi -q)")
        return energy_findings(reading)
