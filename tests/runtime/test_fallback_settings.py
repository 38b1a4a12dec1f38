"""A subgraph's Inductor baseline is compiled and timed as the fallback runs it in the user's
graph: the whole graph's channels-last decision, the strides Inductor gives the subgraph's
activations there, the user's Inductor config and cuDNN flags (runtime/fallback.py). CPU: the
graphs are traced with oneDNN off, so Inductor's CUDA layout rule decides, as on a GPU."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import pytest
import torch
import torch._inductor.config as inductor_config
from runtime_helpers import subgraphs_of

from kernelpro_backend.runtime import BaselineCandidate, EvalStatus, Job
from kernelpro_backend.runtime import candidate as candidate_module
from kernelpro_backend.runtime import worker as worker_module
from kernelpro_backend.runtime.fallback import FallbackSettings, layout_decision
from kernelpro_backend.runtime.precision import precision_mode
from kernelpro_backend.runtime.worker import WorkerState, evaluate_job


def _convs(model: torch.nn.Module, x: torch.Tensor) -> list:
    torch._dynamo.reset()
    with torch.no_grad(), torch.backends.mkldnn.flags(enabled=False):
        found = subgraphs_of(model, x)
    return [s for s in found if s.kind == "conv"]


def _options(job: Job) -> dict:
    return dict(job.fallback.inductor)


def _chain() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3, padding=1)
    )


def test_the_whole_graphs_layout_decision_not_the_subgraphs():
    # Most of the graph's FLOPs in a grouped conv keep it NCHW in inference (Inductor's FLOP
    # weights); the small plain conv alone would go channels-last, paying two copies a call.
    model = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 1), torch.nn.Conv2d(8, 64, 3, groups=2))
    first, second = _convs(model, torch.randn(2, 8, 12, 12))
    with torch.backends.mkldnn.flags(enabled=False):
        alone = layout_decision(first.module().graph, inference=True)
        job = Job.from_subgraph(first, BaselineCandidate("inductor"))
    assert alone is True
    assert _options(job)["layout_optimization"] is False
    assert _options(job)["force_layout_optimization"] is False
    assert job.fallback.graph_input_meta is None
    assert [b.input_meta for b in job.baselines()] == [job.input_meta] * 2


def test_activations_laid_channels_last_for_inductor_alone():
    first, second = _convs(_chain(), torch.randn(2, 8, 8, 8))
    with torch.backends.mkldnn.flags(enabled=False):
        one = Job.from_subgraph(first, BaselineCandidate("eager"))
        two = Job.from_subgraph(second, BaselineCandidate("eager"))
    assert _options(one)["force_layout_optimization"] is True
    # the graph's input arrives NCHW; the conv+relu output feeds the next conv: it stays NHWC
    assert one.fallback.graph_input_meta is None
    assert _options(one)["keep_output_stride"] is False
    assert _options(two)["keep_output_stride"] is True  # the graph returns it, as NCHW
    eager, inductor = two.baselines()
    assert eager.input_meta == two.input_meta  # behind kernelpro::launch: the aten strides
    activation = next(i for i, m in enumerate(two.input_meta) if m[0] == (2, 16, 8, 8))
    assert two.input_meta[activation][1] == (1024, 64, 8, 1)
    assert inductor.input_meta[activation][1] == (1024, 1, 128, 16)
    assert inductor.input_meta[:activation] == two.input_meta[:activation]


def test_user_config_and_cudnn_flags_reach_the_job():
    (sg,) = _convs(torch.nn.Conv2d(4, 8, 3), torch.randn(1, 4, 6, 6))
    before = torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic
    try:
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = True, True
        with inductor_config.patch(max_autotune=True, coordinate_descent_tuning=True):
            job = Job.from_subgraph(sg, BaselineCandidate("inductor"))
    finally:
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = before
    assert job.fallback.cudnn_benchmark and job.fallback.cudnn_deterministic
    assert _options(job)["max_autotune"] is True
    assert _options(job)["coordinate_descent_tuning"] is True
    assert "triton.cudagraphs" not in _options(job)  # the worker times replays itself
    deterministic = torch.backends.cudnn.deterministic
    with precision_mode("tf32", True, not deterministic):
        assert torch.backends.cudnn.deterministic is (not deterministic)
    assert torch.backends.cudnn.deterministic is deterministic


def test_a_job_without_a_graph_leaves_the_workers_defaults():
    assert FallbackSettings.of(object()) == FallbackSettings(
        cudnn_benchmark=torch.backends.cudnn.benchmark,
        cudnn_deterministic=torch.backends.cudnn.deterministic,
    )


def test_load_kernel_compiles_inductor_with_the_graphs_options(monkeypatch):
    seen = {}

    def fake_compile(fn, backend=None, options=None):
        seen.update(backend=backend, options=options)
        return fn

    monkeypatch.setattr(candidate_module.torch, "compile", fake_compile)
    reference = torch.nn.Identity()
    options = {"layout_optimization": False}
    got = candidate_module.load_kernel(
        BaselineCandidate("inductor"), reference, Path("."), inductor_options=options
    )
    assert got is reference and seen == {"backend": "inductor", "options": options}


def test_the_worker_loads_the_baseline_with_the_jobs_settings(monkeypatch):
    (sg,) = _convs(torch.nn.Conv2d(4, 8, 3), torch.randn(1, 4, 6, 6))
    with torch.backends.mkldnn.flags(enabled=False):
        job = Job.from_subgraph(sg, BaselineCandidate("inductor"))
    seen = {}
    real = worker_module.load_kernel

    def spy(candidate, reference, workdir, **kwargs):
        seen.update(kwargs, deterministic=torch.backends.cudnn.deterministic)
        return real(BaselineCandidate("eager"), reference, workdir)

    monkeypatch.setattr(worker_module, "load_kernel", spy)
    flags = FallbackSettings(job.fallback.inductor, None, False, True)
    state = WorkerState(Path(tempfile.mkdtemp(prefix="kernelpro-test-")))
    result = evaluate_job(dataclasses.replace(job, fallback=flags), state)
    assert result.status is EvalStatus.OK, result.message
    assert seen["inductor_options"] == _options(job)
    assert seen["inductor_options"]["layout_optimization"] is True
    assert seen["deterministic"] is True


@pytest.mark.gpu
def test_inductor_baseline_of_a_mid_graph_conv_is_not_charged_two_copies():
    """On the GPU: the second conv of a channels-last chain, its Inductor baseline timed with
    the graph's layout, is no slower than that baseline timed as before (NCHW in and out)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    model = torch.nn.Sequential(
        torch.nn.Conv2d(64, 64, 1), torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 1)
    ).cuda()
    _, second = _convs(model, torch.randn(64, 64, 56, 56, device="cuda"))
    job = Job.from_subgraph(second, BaselineCandidate("eager"))
    _, inductor = job.baselines()
    state = WorkerState(Path(tempfile.mkdtemp(prefix="kernelpro-test-")))
    laid = evaluate_job(inductor, state)
    torch._dynamo.reset()
    alone = dataclasses.replace(inductor, input_meta=job.input_meta, fallback=FallbackSettings())
    plain = evaluate_job(alone, state)
    assert laid.ok and plain.ok, (laid.message, plain.message)
    assert laid.median_ms <= plain.median_ms + laid.spread_ms + plain.spread_ms
