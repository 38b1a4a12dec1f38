"""A convolution's subgraph follows cuDNN's TF32 setting, as eager and Inductor run it; every
other subgraph follows the float32 matmul precision. The worker times baselines under the
user's cuDNN algorithm search (`cudnn.benchmark`)."""

from __future__ import annotations

import pytest
import torch
from helpers import subgraphs_of

from kernelpro_backend.fx_passes.keys import precision_policy
from kernelpro_backend.runtime.precision import precision_mode


@pytest.fixture
def cudnn_tf32():
    old = torch.backends.cudnn.allow_tf32
    yield
    torch.backends.cudnn.allow_tf32 = old


@pytest.mark.parametrize("allowed, policy", [(True, "tf32"), (False, "ieee")])
def test_conv_subgraphs_follow_cudnn_tf32(cudnn_tf32, allowed, policy):
    torch.backends.cudnn.allow_tf32 = allowed
    assert torch.get_float32_matmul_precision() == "highest"
    assert precision_policy("auto", conv=True) == policy
    assert precision_policy("auto") == "ieee"  # matmuls: PyTorch's default is IEEE
    assert precision_policy("ieee", conv=True) == "ieee"  # a forced policy stays forced
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(16, 2)
    )
    found = subgraphs_of(model, torch.randn(2, 3, 4, 4), train=False)
    convs = [s for s in found if s.kind == "conv"]
    others = [s for s in found if s.kind != "conv"]
    assert convs and others
    assert {s.precision for s in convs} == {policy}
    assert {s.precision for s in others} == {"ieee"}
    # the precision is part of the key: a cache entry made under the other setting misses
    torch.backends.cudnn.allow_tf32 = not allowed
    again = [
        s for s in subgraphs_of(model, torch.randn(2, 3, 4, 4), train=False) if s.kind == "conv"
    ]
    assert {s.key for s in again}.isdisjoint({s.key for s in convs})


def test_precision_mode_sets_and_restores_cudnn_benchmark():
    before = torch.backends.cudnn.benchmark
    with precision_mode("tf32", cudnn_benchmark=not before):
        assert torch.backends.cudnn.benchmark is (not before)
        assert torch.backends.cudnn.allow_tf32
    assert torch.backends.cudnn.benchmark is before
    with precision_mode("ieee"):
        assert torch.backends.cudnn.benchmark is before
        assert not torch.backends.cudnn.allow_tf32
