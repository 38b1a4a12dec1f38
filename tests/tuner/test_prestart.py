"""A warm-up starts the search's worker pool before it traces the model, so the pool's start
(~15 s on the GPU machine: CUDA contexts, torch and Triton imports) overlaps the compile; the
pool started early is the very pool the searches lease (same size and settings), started once."""

from __future__ import annotations

import contextlib

import pytest
import torch

from kernelpro_backend.options import Options
from kernelpro_backend.warmup import warmup


class _Provider:
    def __init__(self) -> None:
        self.events: list[str] = []

    def prestart(self) -> None:
        self.events.append("prestart")

    def find(self, subgraph):
        self.events.append("find")
        return None


def test_a_warmup_starts_the_workers_before_it_looks_up_any_subgraph():
    provider = _Provider()
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Softmax(-1))
    torch._dynamo.reset()
    warmup(model, (torch.randn(4, 8),), provider=provider, options={"fallback": "eager"})
    assert provider.events[0] == "prestart" and provider.events.count("prestart") == 1
    assert "find" in provider.events


class _Searcher:
    def __init__(self) -> None:
        self.started = 0

    def prestart(self) -> None:
        self.started += 1

    def __call__(self, subgraph):
        return None


def test_the_finder_starts_workers_only_when_it_may_search(tmp_path):
    from kernelpro_backend.tuner import KernelFinder

    for policy, starts in (("on-miss", 1), ("cache-only", 0)):
        searcher = _Searcher()
        options = Options.resolve(
            options={"cache_dir": str(tmp_path / policy), "search": policy}, environ={}
        )
        KernelFinder.from_options(options, searcher=searcher).prestart()
        assert searcher.started == starts, policy


def test_the_searcher_prestarts_the_pool_it_leases(monkeypatch, tmp_path):
    import kernelpro_backend.tuner.searcher as searcher_module
    from kernelpro_backend.tuner.searcher import SubgraphSearcher

    calls: dict[str, tuple] = {}

    def fake_prestart(*args, **settings):
        calls["prestart"] = (args, settings)

    @contextlib.contextmanager
    def fake_lease(*args, **settings):
        calls["lease"] = (args, settings)
        raise _Leased
        yield

    monkeypatch.setattr(searcher_module, "prestart_pool", fake_prestart)
    monkeypatch.setattr(searcher_module, "lease_pool", fake_lease)
    options = Options.resolve(options={"cache_dir": str(tmp_path), "workers": 3}, environ={})
    searcher = SubgraphSearcher(options)
    searcher.prestart()
    from helpers import subgraphs_of

    (sg,) = subgraphs_of(lambda x: torch.softmax(x, -1), torch.randn(8, 40), train=False)
    with pytest.raises(_Leased):
        searcher(sg)
    assert calls["prestart"] == calls["lease"] and calls["lease"][0][0] == 3


class _Leased(Exception):
    pass


def test_a_prestarted_pool_is_the_one_leased_and_starts_once():
    from kernelpro_backend.runtime import shared_pool

    shared_pool.release_pool()
    try:
        shared_pool.prestart_pool(1, 30.0, idle_s=60.0)
        started = shared_pool._KEEPER.pool
        assert started is not None and shared_pool._KEEPER.users == 0
        with shared_pool.lease_pool(1, 30.0, idle_s=60.0) as pool:
            assert pool is started and pool.start_s is not None and pool.start_s > 0
        with shared_pool.lease_pool(1, 30.0, idle_s=60.0) as pool:
            assert pool is started and pool.start_s == 0.0  # paid once, by the first lease
    finally:
        shared_pool.release_pool()
