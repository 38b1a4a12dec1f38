"""A warm-up starts the search's worker pool before it traces the model, so the pool's start
(~15 s on the GPU machine: CUDA contexts, torch and Triton imports) overlaps the compile; the
pool started early is the very pool the searches lease (same size and settings), started once."""

from __future__ import annotations

import contextlib

import pytest
import torch

from kernelpro_backend.options import Options
from kernelpro_backend.warmup.offline import warmup


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


def test_the_cli_boots_the_workers_before_it_builds_the_model(monkeypatch, tmp_path):
    """`kernelpro warmup MODULE:FN` makes its provider (whose pool starts booting) before it
    imports the target and builds the model, and warms the model with that provider."""
    import sys

    import kernelpro_backend.warmup.offline as warmup_module
    from kernelpro_backend.cli.main import main

    events: list[str] = []
    (tmp_path / "prestart_target.py").write_text(
        "import torch\n"
        "EVENTS = []\n"
        "def build():\n"
        "    EVENTS.append('model')\n"
        "    return torch.nn.Linear(4, 4), (torch.randn(2, 4),)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    provider = _Provider()

    def search_provider(options):
        events.append(f"provider {options['search']} {options['budget_s']}")
        return provider

    def fake_warmup(model, inputs, **kw):
        events.extend(sys.modules["prestart_target"].EVENTS)
        events.append("warmup" if kw["provider"] is provider else "another provider")
        events.append(f"deadline {kw['deadline_s']}")
        events.append(f"cuda graphs {kw['options'].get('cuda_graphs')}")
        return warmup_module.WarmupReport(rows=[], seconds=0.0)

    monkeypatch.setattr(warmup_module, "search_provider", search_provider)
    monkeypatch.setattr(warmup_module, "warmup", fake_warmup)
    argv = ["warmup", "prestart_target:build", "--budget-s", "7", "--deadline-s", "90"]
    assert main(argv) == 0
    assert events == [
        "provider on-miss 7.0",
        "model",
        "warmup",
        "deadline 90.0",
        "cuda graphs None",
    ]
    events.clear()
    sys.modules["prestart_target"].EVENTS.clear()
    assert main([*argv, "--cuda-graphs"]) == 0
    assert events[-1] == "cuda graphs True"


class _AgreeingProvider(_Provider):
    """A provider whose ranks agree on kernels (the distributed finder's `prepare`)."""

    agrees_across_ranks = True

    def __init__(self) -> None:
        super().__init__()
        self.rounds: list[set[str]] = []

    def prepare(self, subgraphs) -> None:
        keys = {sg.key.digest for sg in subgraphs if not sg.symbolic and sg.inputs}
        self.events.append("prepare")
        self.rounds.append(keys)


@pytest.mark.parametrize("fallback", ["eager", "inductor"])
def test_distributed_warmups_agree_on_the_whole_step_in_one_round(fallback):
    """Ranks claim the forward and backward graphs' misses in one round: the step's subgraphs
    are found first (eager fallback, nothing compiled) with the keys the real compile meets, so
    the rounds the forward and backward compiles ask for find nothing new."""
    provider = _AgreeingProvider()
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    torch._dynamo.reset()
    warmup(model, (torch.randn(4, 8),), provider=provider, options={"fallback": fallback})
    first, *later = provider.rounds
    assert provider.events.index("prepare") < provider.events.index("find")
    assert len(later) == 2  # the forward and the backward graph's own rounds
    assert all(keys and keys <= first for keys in later), (first, later)
    assert first == set().union(*later)


def test_a_single_process_warmup_does_not_look_for_the_steps_subgraphs_first():
    """A provider that only prepares (the finder queues CUTLASS builds) is no collective: no
    discovery pass before the real compile, one prepare per graph."""
    provider = _AgreeingProvider()
    provider.agrees_across_ranks = False
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    torch._dynamo.reset()
    warmup(model, (torch.randn(4, 8),), provider=provider, options={"fallback": "eager"})
    assert len(provider.rounds) == 2  # the forward and the backward graph's own


def test_a_warmup_ends_after_the_cutlass_builds_it_started(monkeypatch):
    """Libraries still building when the last search ended are waited for: the next run's
    searches and hits find them built (a warm-up is offline work)."""
    import kernelpro_backend.warmup.offline as warmup_module

    waited: list = []

    class Builds:
        def running(self):
            return 3

        def wait(self, timeout_s):
            waited.append(timeout_s)

    class Searcher:
        cutlass = Builds()

    provider = _Provider()
    provider.searcher = Searcher()
    model = torch.nn.Linear(8, 4)
    torch._dynamo.reset()
    warmup(  # no deadline (the default one would cut the wait at its search share)
        model, (torch.randn(4, 8),), provider=provider, options={"fallback": "eager"},
        deadline_s=None,
    )  # fmt: skip
    assert waited == [warmup_module.BUILDS_WAIT_S]
