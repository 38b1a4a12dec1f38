"""The GEMM sweep re-checks and re-times the kernel a search kept, as a cache hit loads it:
a right kernel gets the sweep's own timing, a wrong one is reported, not timed."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from kernelpro_backend.bench import gemm_sweep
from kernelpro_backend.lowering import lower
from kernelpro_backend.rewrite.providers import CallableKernel
from kernelpro_backend.tuner import artifacts


@pytest.fixture
def linear_subgraph(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(gemm_sweep, "DEVICE", "cpu")
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU())
    sg = gemm_sweep.gemm_subgraph(model, (torch.randn(16, 32),), "ieee")
    return sg, lower(sg)


_TRITON = SimpleNamespace(language="triton")


def _loads(monkeypatch, fn) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(artifacts, "load_artifact", lambda artifact: CallableKernel("k", fn))


def test_a_right_kept_kernel_is_timed_by_the_sweep(linear_subgraph, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    sg, spec = linear_subgraph
    module = sg.module()
    _loads(monkeypatch, lambda *inputs: [o.clone() for o in module(*inputs)])
    row = gemm_sweep._kept_row(sg, spec, artifact=_TRITON)
    assert "kept_error" not in row and math.isnan(row["kept_ms"])  # NaN: CPU times mean nothing


def test_a_wrong_kept_kernel_is_reported_not_timed(linear_subgraph, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    sg, spec = linear_subgraph
    module = sg.module()
    _loads(monkeypatch, lambda *inputs: [o + 1.0 for o in module(*inputs)])
    row = gemm_sweep._kept_row(sg, spec, artifact=_TRITON)
    assert "kept_ms" not in row and row["kept_error"].startswith("wrong:")


def test_an_eager_win_is_timed_as_the_subgraphs_own_ops(linear_subgraph, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A search whose winner is the eager call (tuner/eager.py: no code, nothing to load) is
    re-checked and re-timed as a hit on it runs: the subgraph's ATen ops."""
    from kernelpro_backend.cache.artifact import KernelArtifact

    sg, spec = linear_subgraph
    monkeypatch.setattr(artifacts, "load_artifact", lambda artifact: pytest.fail("loaded"))
    eager = KernelArtifact(language="aten", source="", entry="eager", kernel_ms=1.0)
    row = gemm_sweep._kept_row(sg, spec, artifact=eager)
    assert "kept_error" not in row and math.isnan(row["kept_ms"])


def test_a_sweep_refuses_an_out_holding_an_earlier_sweeps_searches(
    tmp_path, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    """One search cache per run: an earlier run's entries and logs would be reported as this
    run's searches, so a searching sweep into the same OUT stops before any case."""
    (tmp_path / "search-cache" / "logs").mkdir(parents=True)
    monkeypatch.setenv("OUT", str(tmp_path))
    monkeypatch.setattr(gemm_sweep, "run_case", lambda *a, **k: pytest.fail("a case ran"))
    assert gemm_sweep.sweep(cpu_smoke=True, search_only=["all"]) == 2
    assert "earlier sweep" in capsys.readouterr().err
    assert not (tmp_path / "gpu_gemm_sweep.json").exists()
