"""The GEMM sweep re-checks and re-times the kernel a search kept, as a cache hit loads it:
a right kernel gets the sweep's own timing, a wrong one is reported, not timed."""

from __future__ import annotations

import math

import pytest
import torch

from kernelpro_backend.bench import gemm_sweep
from kernelpro_backend.lowering import lower
from kernelpro_backend.providers import CallableKernel
from kernelpro_backend.tuner import artifacts


@pytest.fixture
def linear_subgraph(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(gemm_sweep, "DEVICE", "cpu")
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU())
    sg = gemm_sweep.gemm_subgraph(model, (torch.randn(16, 32),), "ieee")
    return sg, lower(sg)


def _loads(monkeypatch, fn) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(artifacts, "load_artifact", lambda artifact: CallableKernel("k", fn))


def test_a_right_kept_kernel_is_timed_by_the_sweep(linear_subgraph, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    sg, spec = linear_subgraph
    module = sg.module()
    _loads(monkeypatch, lambda *inputs: [o.clone() for o in module(*inputs)])
    row = gemm_sweep._kept_row(sg, spec, artifact=object())
    assert "kept_error" not in row and math.isnan(row["kept_ms"])  # NaN: CPU times mean nothing


def test_a_wrong_kept_kernel_is_reported_not_timed(linear_subgraph, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    sg, spec = linear_subgraph
    module = sg.module()
    _loads(monkeypatch, lambda *inputs: [o + 1.0 for o in module(*inputs)])
    row = gemm_sweep._kept_row(sg, spec, artifact=object())
    assert "kept_ms" not in row and row["kept_error"].startswith("wrong:")
