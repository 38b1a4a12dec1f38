"""A subgraph's library calls (GEMM, convolution, attention) timed alone on random inputs of
their shapes, for the warm-up's plan (profilers/anchors.py). CPU: a fake timer runs each call
once and says what it took; the CUDA timer is the GPU tier's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernelpro_backend.backend import make_backend
from kernelpro_backend.profilers.anchors import anchors_ms
from kernelpro_backend.warmup.planned import anchor_timer, library_time


def _subgraphs(fn, *args):
    store: list = []
    backend = make_backend(observer=lambda kind, sgs: store.extend(sgs))
    torch._dynamo.reset()
    torch.compile(fn, backend=backend, options={"fallback": "eager", "search": "off"})(*args)
    return store


def _fake_timer(ran: list):
    def timer(call):
        ran.append(call())
        return 0.25

    return timer


def test_a_conv_subgraphs_conv_runs_alone_on_inputs_of_its_shapes():
    x, w = torch.randn(2, 3, 9, 9), torch.randn(4, 3, 3, 3)
    (sg,) = [s for s in _subgraphs(lambda x, w: F.conv2d(x, w).relu(), x, w) if s.kind == "conv"]
    ran: list = []
    assert anchors_ms(sg, _fake_timer(ran)) == 0.25
    (out,) = ran
    assert out.shape == (2, 4, 7, 7) and out.dtype == torch.float32


def test_a_gemm_epilogue_times_its_gemm_only():
    a, b = torch.randn(8, 16), torch.randn(16, 32)
    (sg,) = [s for s in _subgraphs(lambda a, b: (a @ b).relu() + 1, a, b) if s.kind == "gemm"]
    ran: list = []
    assert anchors_ms(sg, _fake_timer(ran)) == 0.25
    (out,) = ran
    assert out.shape == (8, 32)


def test_no_library_call_no_time():
    (sg,) = _subgraphs(lambda x: (x * 2).sigmoid(), torch.randn(8, 8))
    assert anchors_ms(sg, _fake_timer([])) is None


def test_off_the_gpu_the_plan_keeps_the_roofline():
    x, w = torch.randn(2, 3, 9, 9), torch.randn(4, 3, 3, 3)
    (sg,) = [s for s in _subgraphs(lambda x, w: F.conv2d(x, w), x, w) if s.kind == "conv"]
    assert library_time(sg) is None


@pytest.mark.gpu
def test_a_cuda_conv_is_timed_in_milliseconds():
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    x = torch.randn(32, 96, 56, 56, device="cuda")
    w = torch.randn(96, 1, 7, 7, device="cuda")
    convs = _subgraphs(lambda x, w: F.conv2d(x, w, padding=3, groups=96), x, w)
    (sg,) = [s for s in convs if s.kind == "conv"]
    ms = anchors_ms(sg, anchor_timer(sg.device))
    assert ms is not None and 0.001 < ms < 100
    assert library_time(sg) == pytest.approx(ms, rel=0.5)
