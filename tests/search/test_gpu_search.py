"""The search on real GPU timings (softmax_search.py, one shape): it finishes within its budget
and never picks a kernel slower than the fallback."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_search_on_a_triton_softmax(tmp_path):
    from softmax_search import SHAPES, search_softmax

    [row] = search_softmax(tmp_path, shapes=SHAPES[:1], max_trials=12)
    assert row["trials"] + row["trials_saved"] <= 12
    fallback_ms = min(row["eager_ms"], row["inductor_ms"])
    if isinstance(row["winner"], dict):  # a kernel won: it must be measurably faster
        assert row["best_kernel_ms"] < fallback_ms
    assert (tmp_path / "outcomes.json").exists()
