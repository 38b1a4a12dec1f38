"""The per-kernel difference between two profiled variants of a step (profilers/step_diff.py),
from made-up kernel events."""

from __future__ import annotations

import pytest

from kernelpro_backend.profilers.step_diff import StepProfile, diff_lines
from kernelpro_backend.profilers.timeline import KernelEvent


def test_a_profile_sums_each_kernel_per_step_and_spans_first_start_to_last_end():
    events = [KernelEvent("a", 0, 10), KernelEvent("b", 15, 5), KernelEvent("a", 40, 10)]
    p = StepProfile.of_events(events, steps=2)
    assert p.kernels == {"a": (1.0, 10.0), "b": (0.5, 2.5)}
    assert p.busy_us == pytest.approx(12.5) and p.span_us == pytest.approx(25.0)
    assert p.launches == 1.5
    assert StepProfile.of_events([], 2) == StepProfile({}, 0.0, 0.0)


def test_the_difference_lists_increases_then_decreases_and_skips_equal_kernels():
    a = StepProfile({"same": (1, 100.0), "new": (2, 40.0), "slower": (1, 90.0)}, 230, 300)
    b = StepProfile({"same": (1, 100.0), "gone": (1, 60.0), "slower": (1, 20.0)}, 180, 190)
    lines = diff_lines(a, b, ("with", "without"))
    assert lines[0] == (
        "  on the GPU, a step with against without: kernels 0.23 against 0.18 ms, "
        "4 against 3 launches, idle between them 0.07 against 0.01 ms"
    )
    assert [line.split()[-1] for line in lines[1:]] == ["slower", "new", "gone"]
    assert lines[1].split()[:4] == ["+0.070", "ms,", "+0", "launches"]
    assert lines[3].split()[:4] == ["-0.060", "ms,", "-1", "launches"]


def test_many_increases_do_not_hide_the_decreases():
    """Six kernels that grew and one that shrank: the one shows (the report of a step whose
    new kernels filled the list said nothing of what they displaced)."""
    a = StepProfile({f"k{i}": (1, 100.0 + i) for i in range(6)}, 615, 615)
    b = StepProfile({"displaced": (2, 50.0)}, 50, 50)
    names = [line.split()[-1] for line in diff_lines(a, b, ("a", "b"))[1:]]
    assert names == ["k5", "k4", "k3", "k2", "k1", "displaced"]


def test_long_kernel_names_are_cut():
    name = "triton_poi_fused_" + "x" * 100
    line = diff_lines(StepProfile({name: (1, 5.0)}, 5, 5), StepProfile({}, 0, 0), ("a", "b"))[1]
    assert line.endswith("...") and len(line.split()[-1]) == 56


def test_a_failed_profile_is_logged_and_the_check_goes_on(monkeypatch, caplog):
    import types

    from kernelpro_backend.warmup import incontext_steps

    def broken(run):  # type: ignore[no-untyped-def]
        raise RuntimeError("CUPTI busy")

    monkeypatch.setattr(incontext_steps, "profile_step", broken)
    steps = incontext_steps.StepVariants.__new__(incontext_steps.StepVariants)
    steps.profiles = {}
    with caplog.at_level("WARNING", logger="kernelpro.warmup"):
        stepper = types.SimpleNamespace(once=lambda: None)
        steps._profile([stepper, stepper], [(frozenset(), False), (frozenset("a"), False)])
    assert steps.profiles == {} and "profiling a variant of the step failed" in caplog.text
    assert "CUPTI busy" in caplog.text


@pytest.mark.gpu
def test_a_cuda_step_is_profiled_kernel_by_kernel():
    import torch

    from kernelpro_backend.profilers.step_diff import profile_step

    x = torch.randn(1024, 1024, device="cuda")
    p = profile_step(lambda: (x @ x).relu_().sum().item())
    assert p.launches >= 3 and 0 < p.busy_us <= p.span_us * 1.01
    assert any("gemm" in name.lower() or "xmma" in name.lower() for name in p.kernels)
