"""The rule that stops a timing once its median is settled, and the CPU timing path that
applies it (the CUDA paths take the same batches: test_timing_gpu.py); and the rule that rejects
a kernel whose work outlives the stream it is timed on."""

import random

import pytest
import torch

from kernelpro_backend.runtime import timing
from kernelpro_backend.runtime.timing import (
    SETTLE_BATCH,
    SETTLE_FRACTION,
    SETTLE_MIN_REPS,
    _batches,
    settled,
    time_kernel,
)


def test_tight_runs_settle_once_there_are_enough_of_them():
    rng = random.Random(0)
    runs = [1.0 + rng.gauss(0, 0.0005) for _ in range(SETTLE_MIN_REPS)]
    assert settled(runs)
    assert not settled(runs[: SETTLE_MIN_REPS - 1])  # too few, however tight


def test_spread_runs_do_not_settle():
    rng = random.Random(1)
    runs = [1.0 + rng.gauss(0, 0.05) for _ in range(200)]  # 5% noise: interval ~0.7% wide
    assert not settled(runs)


def test_drifting_runs_do_not_settle_however_tight_each_half_is():
    first, second = [1.0] * 20, [1.01] * 20  # clocks moved 1% between the halves
    assert not settled(first + second)
    assert settled(first + first)


def test_a_few_outliers_leave_the_median_settled():
    rng = random.Random(2)
    runs = [1.0 + rng.gauss(0, 0.0005) for _ in range(40)]
    runs[5] = runs[17] = 3.0  # two preempted runs
    assert settled(runs)


def test_the_interval_is_read_at_ranks_n_over_2_minus_and_plus_0_98_sqrt_n():
    # n = 30: the ranks 9 and 21 (0-based, sorted) bound the median's 95% interval
    rng = random.Random(3)
    outside = 1.0 - 2 * SETTLE_FRACTION
    nine = [outside] * 9 + [1.0] * 21  # rank 9 is still 1.0
    ten = [outside] * 10 + [1.0] * 20  # rank 9 is outside the fraction
    rng.shuffle(nine)
    rng.shuffle(ten)
    assert settled(nine)
    assert not settled(ten)


def test_batches_cover_every_run():
    assert _batches(25, False) == [25]
    assert _batches(25, True) == [SETTLE_BATCH, SETTLE_BATCH, 5]
    assert sum(_batches(500, True)) == 500


def _clock(durations_ms):
    """A perf_counter whose reads alternate start and end of runs lasting `durations_ms`."""
    now, reads, runs = [0.0], [0], iter(durations_ms)

    def read() -> float:
        if reads[0] % 2:  # an end: the run took its duration
            now[0] += next(runs) / 1e3
        reads[0] += 1
        return now[0]

    return read


def test_a_steady_cpu_kernel_stops_early_and_a_full_budget_does_not(monkeypatch):
    x = torch.randn(64, 64)
    monkeypatch.setattr(timing.time, "perf_counter", _clock([1.0] * 1000))
    early = time_kernel(torch.relu, [[x]], torch.device("cpu"), budget_s=0.1, settle=True)
    monkeypatch.setattr(timing.time, "perf_counter", _clock([1.0] * 1000))
    full = time_kernel(torch.relu, [[x]], torch.device("cpu"), budget_s=0.1)
    assert len(early.times_ms) == SETTLE_MIN_REPS < len(full.times_ms) == 100
    assert early.median_ms == pytest.approx(1.0) and full.median_ms == pytest.approx(1.0)
    assert early.method == full.method == "perf_counter"


def test_a_noisy_cpu_kernel_takes_its_whole_budget(monkeypatch):
    rng = random.Random(4)
    runs = [1.0] + [1.0 + rng.gauss(0, 0.1) for _ in range(1000)]  # the estimate reads 1 ms
    monkeypatch.setattr(timing.time, "perf_counter", _clock(runs))
    noisy = time_kernel(torch.relu, [[torch.randn(8)]], torch.device("cpu"), 0.1, settle=True)
    assert len(noisy.times_ms) == 100  # the budget's runs: never settled


def test_heat_runs_the_kernel_untimed_first_and_drops_those_runs(monkeypatch):
    """A kernel that runs fast while the GPU is cool (boost clocks) and slower once heated:
    settled at once without heat, its median reads the cool time; after `heat_s` of untimed
    runs the timed ones are all heated, and only they are reported."""

    def kernel_and_clock():  # each call of the kernel advances the clock by its duration
        now, runs = [0.0], iter([0.85] * 50 + [1.0] * 2000)  # 50 runs at boost clocks

        def kernel(x):
            now[0] += next(runs) / 1e3
            return x

        monkeypatch.setattr(timing.time, "perf_counter", lambda: now[0])
        return kernel

    x = torch.randn(8)
    cpu = torch.device("cpu")
    cool = time_kernel(kernel_and_clock(), [[x]], cpu, 0.1, settle=True)
    assert cool.median_ms == pytest.approx(0.85) and len(cool.times_ms) == SETTLE_MIN_REPS
    heated = time_kernel(kernel_and_clock(), [[x]], cpu, 0.1, settle=True, heat_s=0.06)
    assert len(heated.times_ms) == SETTLE_MIN_REPS
    assert all(t == pytest.approx(1.0) for t in heated.times_ms)


def test_work_left_on_another_stream_is_caught_by_the_device_wide_clock():
    """Events on the caller's stream spanning 0.2 ms, then the device busy 140 ms more (a side
    stream's sleep, never joined back), is rejected; the synchronize's latency is not, nor a
    long kernel's small tail."""
    from kernelpro_backend.runtime.timing import OffStreamWork, _check_one_stream

    with pytest.raises(OffStreamWork, match="another stream"):
        _check_one_stream(tail_ms=140.0, span_ms=0.2)
    _check_one_stream(tail_ms=0.02, span_ms=0.2)  # a tiny kernel: the sync's latency
    _check_one_stream(tail_ms=2.0, span_ms=50.0)


def test_a_worker_reports_work_on_another_stream_as_suspicious_not_as_a_crash():
    from kernelpro_backend.runtime.result import EvalStatus
    from kernelpro_backend.runtime.timing import OffStreamWork, _check_one_stream
    from kernelpro_backend.runtime.worker import _failure

    with pytest.raises(OffStreamWork) as caught:
        _check_one_stream(tail_ms=140.0, span_ms=0.2)
    result = _failure(caught.value, "timing")
    assert result.status == EvalStatus.SUSPICIOUS and "another stream" in result.message
