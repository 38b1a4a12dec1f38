"""The search on real GPU timings (scripts/gpu_search.py, quick mode): it finishes within its
budget and never picks a kernel slower than the fallback."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_search_on_a_triton_softmax(tmp_path, monkeypatch):
    monkeypatch.setenv("OUT", str(tmp_path))
    path = Path(__file__).resolve().parents[2] / "scripts" / "gpu_search.py"
    spec = importlib.util.spec_from_file_location("gpu_search", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gpu_search", module)  # dataclasses look the module up
    spec.loader.exec_module(module)
    [row] = module.main(quick=True)
    assert row["trials"] + row["trials_saved"] <= 12
    fallback_ms = min(row["eager_ms"], row["inductor_ms"])
    if isinstance(row["winner"], dict):  # a kernel won: it must be measurably faster
        assert row["best_kernel_ms"] < fallback_ms
    assert (tmp_path / "outcomes.json").exists()
