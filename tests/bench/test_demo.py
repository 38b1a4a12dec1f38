"""The demo compares compile times from cold caches: each compiled mode gets empty Inductor and
Triton cache directories, and the output says what was and was not cached."""

from __future__ import annotations

import os

import pytest
import torch
from torch._dynamo.utils import counters

from kernelpro_backend.bench.demo import CACHE_VARS, cold_compile_caches, run_demo


def _compile_once() -> None:
    x = torch.randn(8, 8, requires_grad=True)
    torch.compile(lambda t: (t.sin() * 2).sum())(x).backward()


def test_each_name_compiles_into_an_empty_cache_of_its_own():
    """The same function compiled under two names: the second compile finds no cached graph
    (it reads its own, empty directory) and writes its code there; the environment comes back
    as it was."""
    before = {var: os.environ.get(var) for var in CACHE_VARS}
    with cold_compile_caches() as fresh:
        first = fresh("a")
        _compile_once()
        assert any(first.iterdir()), "the first compile wrote nothing into its cache"
        torch._dynamo.reset()  # compile the same function again
        counters.clear()
        second = fresh("b")
        assert not any(second.iterdir())
        _compile_once()
        assert counters["inductor"]["fxgraph_cache_hit"] == 0
        assert counters["inductor"]["fxgraph_cache_miss"] > 0
        assert any(second.iterdir())
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(second)
    assert {var: os.environ.get(var) for var in CACHE_VARS} == before
    assert not first.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only demo")
def test_demo_compiles_kernelpro_from_cold_caches_and_says_so(capsys, caplog):
    """Inductor compiles first; kernelpro's compile of the same graphs must not read the
    code Inductor's compile left behind (it once did: 26 s against 2 s). The missing GPU is
    said once, in the demo's words, not again by the backend's warning."""
    from kernelpro_backend import backend

    backend._warn_no_cuda_once.cache_clear()
    counters.clear()
    assert run_demo(steps=1) == 0
    assert counters["inductor"]["fxgraph_cache_hit"] == 0
    assert "no CUDA GPU here" not in caplog.text
    out = capsys.readouterr().out
    assert "each compiled with empty Inductor and Triton caches" in out
    assert "kernel search needs one" in out
