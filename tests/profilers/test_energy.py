"""The energy figure with a fake meter and clock: joules per call counted from one step of the
NVML counter to another, idle draw beside, a counter that is missing, goes back or never
moves, the power cap; and on the GPU, a real kernel's reading."""

from __future__ import annotations

import pytest
import torch

from kernelpro_backend.profilers.energy import (
    EnergyReading,
    NvmlMeter,
    PowerCap,
    batch_calls,
    measure_loop,
    power_cap,
)


class FakeGpu:
    """A GPU drawing `watts` while it runs (calls of `call_s` each) whose energy counter (mJ)
    only moves every `step_s`, as NVML's does; `clock` is the loop's clock."""

    def __init__(self, watts=300.0, call_s=0.001, step_s=0.1, idle_w=60.0, start_mj=10**9, t0=0.0):
        self.t, self.watts, self.call_s, self.step_s = 0.0, watts, call_s, step_s
        self.idle_w, self.start_mj = idle_w, start_mj
        self.t = t0
        self.reads: list[int | None] | None = None  # scripted counter values, if given
        self.limits = (700.0, 700.0)

    def clock(self) -> float:
        return self.t

    def run(self, batch: int):
        def run() -> int:
            self.t += batch * self.call_s
            return batch

        return run

    def energy_mj(self) -> int | None:
        if self.reads is not None:
            return self.reads.pop(0)
        last_step = int(self.t / self.step_s + 1e-9) * self.step_s
        return self.start_mj + round(last_step * self.watts * 1e3)

    def power_w(self) -> float | None:
        return self.idle_w

    def limits_w(self):
        return self.limits


def test_joules_per_call_are_counted_between_counter_steps():
    gpu = FakeGpu(watts=300.0, call_s=0.001, step_s=0.1, t0=0.05)  # the loop starts mid-step
    reading = measure_loop(gpu.run(7), gpu, min_s=0.15, clock=gpu.clock)
    # 300 W for 1 ms a call: 0.3 J, to a batch, because both ends are counter steps (0.1 s and
    # 0.3 s); counted from the loop's start to a window of 0.15 s instead, 154 calls (0.05 to
    # 0.204 s) would get two steps' 60 J: 0.39 J a call
    assert reading is not None and reading.aligned
    assert reading.joules_per_call == pytest.approx(0.3, rel=0.03)
    assert reading.seconds_per_call == pytest.approx(0.001, rel=0.03)
    assert reading.watts == pytest.approx(300.0, rel=0.05)
    assert reading.idle_watts == 60.0
    assert reading.dynamic_joules_per_call == pytest.approx(0.3 - 0.06, rel=0.05)
    assert reading.window_s >= 0.15  # from a step to one >= min_s later


def test_the_loop_runs_for_the_minimum_window_and_two_steps():
    gpu = FakeGpu(step_s=0.25)
    reading = measure_loop(gpu.run(5), gpu, min_s=0.2, clock=gpu.clock)
    assert reading is not None and reading.aligned
    assert gpu.t >= 0.5  # the second step comes at 0.5 s, after the 0.2 s minimum
    assert reading.calls == pytest.approx(250, abs=5)  # calls between the two steps


def test_a_counter_that_steps_once_counts_the_whole_window_unaligned():
    gpu = FakeGpu(step_s=0.7)  # one step inside max_s = 1 s
    reading = measure_loop(gpu.run(10), gpu, min_s=0.3, max_s=1.0, clock=gpu.clock)
    assert reading is not None and not reading.aligned
    assert reading.calls == 1000 and reading.window_s == pytest.approx(1.0)
    assert reading.joules_per_call == pytest.approx(300 * 0.7 / 1000)


@pytest.mark.parametrize(
    "reads",
    [
        [None],  # no counter at all
        [5000, 6000, None],  # lost mid-loop
        [5000, 6000, 4000],  # went back (driver reloaded)
        [5000] * 40,  # never moved within max_s
    ],
)
def test_a_counter_missing_going_back_or_still_gives_no_figure(reads):
    gpu = FakeGpu()
    gpu.reads = list(reads)
    assert measure_loop(gpu.run(50), gpu, min_s=0.1, max_s=1.0, clock=gpu.clock) is None


def test_a_reading_without_idle_power_reports_no_dynamic_share():
    reading = EnergyReading(0.5, 0.002, 100)
    assert reading.dynamic_joules_per_call is None
    record = EnergyReading(0.5, 0.002, 100, idle_watts=50.0, window_s=0.2).to_dict()
    assert record["j"] == 0.5 and record["dynamic_j"] == pytest.approx(0.4)
    assert record["watts"] == 250.0 and record["idle_w"] == 50.0 and record["aligned"]


def test_batches_are_about_five_milliseconds_of_calls():
    assert batch_calls(0.001) == 5
    assert batch_calls(0.1) == 1 and batch_calls(0.0) == 1


def test_power_cap_notes_a_limit_below_the_default():
    gpu = FakeGpu()
    assert power_cap(gpu) == PowerCap(700.0, 700.0)
    assert not power_cap(gpu).capped and "700 W (the default)" in power_cap(gpu).note()
    gpu.limits = (450.0, 700.0)
    cap = power_cap(gpu)
    assert cap.capped and cap.note() == "power-capped: 450 W enforced of 700 W"
    assert cap.to_dict()["capped"] is True
    gpu.limits = (None, 700.0)
    assert power_cap(gpu) is None and power_cap(None) is None


def test_without_nvml_there_is_no_meter(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert NvmlMeter.open(0) is None


@pytest.mark.gpu
def test_a_real_kernel_has_joules_per_call_on_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from kernelpro_backend.runtime.energy import kernel_energy
    from kernelpro_backend.runtime.timing import time_kernel

    device = torch.device("cuda")
    x = torch.randn(4096, 4096, device=device)
    timing = time_kernel(torch.softmax, [(x, -1)], device)
    meter = NvmlMeter.open(0)
    if meter is None:
        pytest.skip("no NVML")
    reading = kernel_energy(torch.softmax, (x, -1), device, timing, meter)
    assert reading is not None and reading.joules_per_call > 0
    assert 10 < reading.watts < 2000
    assert power_cap(meter) is not None


def test_an_nvml_binding_without_a_reading_gives_no_figure_not_an_error(monkeypatch):
    """The GPU image's binding lacked a power-limit read once and the bench died in its
    header: a missing NVML function is a missing figure."""
    import sys
    import types

    from kernelpro_backend.profilers.energy import NvmlMeter, power_cap

    fake = types.SimpleNamespace(NVMLError=RuntimeError, nvmlDeviceGetPowerUsage=lambda h: 1500)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    meter = NvmlMeter(handle=object())
    assert meter.limits_w() == (None, None) and power_cap(meter) is None
    assert meter.power_w() == 1.5
