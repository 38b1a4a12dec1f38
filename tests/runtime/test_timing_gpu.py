"""On the GPU: a search gives up on a candidate by its kernel's time, not by its launch's.

A short kernel's warm-up events bracket the host's launch too (the GPU idles between calls),
so they read the launch: before the fix most 7 us GEMMs of a search at 1024^3 read 40-100 us
and were given up against a limit of ~13 us, unmeasured (BENCHMARKS.md, "The search's give-up
rule, on short kernels")."""

import time

import pytest
import torch

from kernelpro_backend.runtime.timing import LAUNCH_BOUND_MS, time_kernel

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.timing,  # asserts on timings: the tier runs it with the GPU to itself
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

DEVICE = torch.device("cuda")


def _short():
    """A kernel of a few microseconds, and its inputs."""
    x = torch.randn(1024, device=DEVICE)
    out = torch.empty_like(x)
    return (lambda a: torch.add(a, 1.0, out=out)), [[x]]


def _host_heavy(fn):
    """`fn` behind 200 us of Python per call: a launch that long and a kernel this short, as
    a slow host's launcher makes it."""

    def slow(*args):
        until = time.perf_counter() + 200e-6
        while time.perf_counter() < until:
            pass
        return fn(*args)

    return slow


def test_a_short_kernel_behind_a_slow_launch_is_timed_not_abandoned():
    fn, sets = _short()
    slow = _host_heavy(fn)
    alone = time_kernel(fn, sets, DEVICE, budget_s=0.1)
    assert alone.method == "cuda_graph" and alone.median_ms < LAUNCH_BOUND_MS
    limit = 3 * alone.median_ms + 0.005
    timing = time_kernel(slow, sets, DEVICE, budget_s=0.1, abandon_above_ms=limit)
    assert timing.method == "cuda_graph", timing
    assert timing.median_ms <= limit, (timing.median_ms, limit)


def test_a_short_kernel_slower_than_the_limit_is_abandoned_by_its_replays():
    fn, sets = _short()
    timing = time_kernel(fn, sets, DEVICE, budget_s=0.1, abandon_above_ms=1e-6)
    assert timing.method == "cuda_graph-abandoned"
    assert len(timing.times_ms) == 3


def test_a_long_kernel_is_abandoned_by_its_warm_up_events():
    a = torch.randn(4096, 4096, device=DEVICE)
    timing = time_kernel(lambda x: x @ x @ x, [[a]], DEVICE, budget_s=0.1, abandon_above_ms=0.01)
    assert timing.method == "events-abandoned"
    assert timing.median_ms > LAUNCH_BOUND_MS


@pytest.mark.parametrize("kind", ["graph", "events"])
def test_a_settled_timing_stops_early_near_the_full_budgets_median(kind):
    """`settle`: both CUDA paths stop once the median is settled, and read what the whole
    budget reads (within the spread floor `faster` adds anyway)."""
    from kernelpro_backend.runtime.timing import SETTLE_MIN_REPS, SPREAD_FLOOR

    if kind == "graph":
        fn, sets = _short()
    else:
        a = torch.randn(4096, 4096, device=DEVICE)
        fn, sets = (lambda x: x @ x), [[a]]
    full = time_kernel(fn, sets, DEVICE, budget_s=0.25)
    early = time_kernel(fn, sets, DEVICE, budget_s=0.25, settle=True)
    assert early.method == full.method == ("cuda_graph" if kind == "graph" else "events")
    assert SETTLE_MIN_REPS <= len(early.times_ms) < len(full.times_ms), (early, full)
    assert abs(early.median_ms - full.median_ms) <= 2 * SPREAD_FLOOR * full.median_ms
