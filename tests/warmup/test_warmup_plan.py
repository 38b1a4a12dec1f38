"""A planned warm-up (warmup/planned.py) on the CPU with a fake searcher: the step's subgraphs
found first, each distinct key searched once in descending estimated gain, the floor, the
deadline's list of what it left, a second run going on with the next best, the phases."""

from __future__ import annotations

import logging

import pytest
import torch

from kernelpro_backend.cache import KernelArtifact
from kernelpro_backend.options import Options
from kernelpro_backend.rewrite.providers import CallableKernel
from kernelpro_backend.tuner import KernelFinder
from kernelpro_backend.tuner.plan import Estimate, planning_ceilings
from kernelpro_backend.warmup import planned as planned_module
from kernelpro_backend.warmup.offline import warmup


class Blocks(torch.nn.Module):
    """The compile meets a small head first; three identical blocks (one key, three times)
    and a wider projection are worth more, by the estimate."""

    def __init__(self) -> None:
        super().__init__()
        self.small = torch.nn.Linear(8, 8)
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(64, 64) for _ in range(3))
        self.big = torch.nn.Linear(64, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.softmax(self.small(x[:, :8]), -1)
        h = x
        for block in self.blocks:
            h = torch.relu(block(h))
        return self.big(h).sum() + y.sum()


CEILINGS = planning_ceilings(None)


def _gain(subgraph, count: int = 1) -> float:
    return count * Estimate.of(subgraph, CEILINGS).gain_ms


class Searcher:
    """Records what it searched, in order; 'finds' a kernel (the subgraph's own reference, 1 ms
    faster than the fallback) for the keys in `wins`; each search moves `clock` by `step_s`."""

    def __init__(self, wins: int = 0, clock: list[float] | None = None, step_s: float = 0.0):
        self.searched: list = []
        self.modules: dict = {}
        self.wins, self.clock, self.step_s = wins, clock, step_s

    def __call__(self, subgraph):
        self.searched.append(subgraph)
        if self.clock is not None:
            self.clock[0] += self.step_s
        if len(self.searched) > self.wins:
            return None
        digest = subgraph.key.digest
        self.modules[digest] = subgraph.module()
        return KernelArtifact(
            language="python", source="", entry="reference", launch={"digest": digest},
            kernel_ms=0.01, baselines_ms={"eager": 1.01, "inductor": 1.01},
        )  # fmt: skip

    def load(self, artifact):
        return CallableKernel("reference", self.modules[artifact.launch["digest"]])


def _finder(tmp_path, searcher: Searcher, **options) -> KernelFinder:
    resolved = Options.resolve(
        options={
            "cache_dir": str(tmp_path / "cache"), "fallback": "eager", "search": "on-miss",
            "progress": False, "min_gain_us": 1e-6, **options,
        }
    )  # fmt: skip
    return KernelFinder.from_options(resolved, loader=searcher.load, searcher=searcher)


def _warm(finder, deadline_s=None):
    torch._dynamo.reset()
    return warmup(
        Blocks(), (torch.randn(512, 64),), provider=finder, deadline_s=deadline_s,
        options={"fallback": "eager", "progress": False},
    )  # fmt: skip


def test_the_plan_searches_each_distinct_key_once_best_estimated_gain_first(tmp_path):
    searcher = Searcher()
    report = _warm(_finder(tmp_path, searcher))
    digests = [sg.key.digest for sg in searcher.searched]
    assert len(digests) == len(set(digests))  # identical blocks: one search serves all
    counts = {r.key: r.count for r in report.rows}
    gains = [_gain(sg, counts[sg.key.short()]) for sg in searcher.searched]
    assert gains == sorted(gains, reverse=True)
    # the three blocks' forward key (met after the small head) is searched first
    assert counts[searcher.searched[0].key.short()] == 3
    assert searcher.searched[0].graph == "forward"
    assert report.plan["planned"] == report.plan["searched"] == len(digests)
    assert report.plan["occurrences"] == sum(r.count for r in report.rows)


def test_the_floor_leaves_tiny_subgraphs_unsearched_and_says_so(tmp_path):
    searcher = Searcher()
    report = _warm(_finder(tmp_path, searcher, min_gain_us=1000.0))
    assert searcher.searched == []
    assert report.plan["below_floor"] == report.plan["distinct"] > 0
    assert all("under the 1000.0 us a kernel must save" in r.note for r in report.rows)
    assert "below the floor of 1000.0 us a call" in report.table()


def test_the_deadline_stops_the_searches_and_lists_what_it_left(tmp_path, monkeypatch, caplog):
    clock = [0.0]
    real = planned_module.time.perf_counter
    monkeypatch.setattr(planned_module.time, "perf_counter", lambda: real() + clock[0])
    searcher = Searcher(clock=clock, step_s=1000.0)
    with caplog.at_level(logging.WARNING, logger="kernelpro"):
        report = _warm(_finder(tmp_path, searcher), deadline_s=3000.0)  # search share 1950 s
    assert len(searcher.searched) == 2
    plan = report.plan
    assert plan["searched"] == 2 and plan["not_reached"] == plan["planned"] - 2 > 0
    left = [r for r in report.rows if r.note.startswith("not reached by the deadline")]
    assert len(left) == plan["not_reached"]
    assert len(plan["not_reached_items"]) == plan["not_reached"]
    assert "not reached (a later warm-up resumes with them): " in report.table()
    assert caplog.text.count("the search's share of the deadline is spent") == 1


def test_a_second_warmup_goes_on_with_the_next_best(tmp_path, monkeypatch):
    clock = [0.0]
    real = planned_module.time.perf_counter
    monkeypatch.setattr(planned_module.time, "perf_counter", lambda: real() + clock[0])
    first = Searcher(wins=1, clock=clock, step_s=1000.0)  # a kernel, then the fallback
    _warm(_finder(tmp_path, first), deadline_s=3000.0)
    assert len(first.searched) == 2

    second = Searcher()
    second.modules = first.modules  # the first run's kernel loads in the second's compile
    report = _warm(_finder(tmp_path, second))
    done = {sg.key.digest for sg in first.searched}
    assert done.isdisjoint(sg.key.digest for sg in second.searched)
    assert report.plan["cached"] == 1 and report.plan["searched_before"] == 1
    # the second run starts where the first stopped: its order is the first's plan, less those
    counts = {r.key: r.count for r in report.rows}
    gains = [_gain(sg, counts[sg.key.short()]) for sg in second.searched]
    assert gains == sorted(gains, reverse=True)
    assert max(gains) <= min(_gain(sg, counts[sg.key.short()]) for sg in first.searched)


def test_the_summary_shows_each_phase_in_seconds(tmp_path):
    report = _warm(_finder(tmp_path, Searcher()))
    assert {"collect", "search", "cutlass", "compile"} <= set(report.phases)
    assert all(s >= 0 for s in report.phases.values())
    assert report.phases["collect"] > 0
    table = report.table()
    assert "phases: collecting subgraphs " in table and ", searching " in table
    assert ", compiling " in table
    as_json = report.to_dict()
    assert set(as_json["phases"]) == set(report.phases)
    assert as_json["plan"]["planned"] == report.plan["planned"]


@pytest.mark.parametrize("on", [True, False])
def test_progress_lines_follow_the_progress_option(tmp_path, capsys, on):
    searcher = Searcher()
    torch._dynamo.reset()
    warmup(
        Blocks(), (torch.randn(512, 64),), provider=_finder(tmp_path, searcher),
        options={"fallback": "eager", "progress": on}, deadline_s=None,
    )  # fmt: skip
    err = capsys.readouterr().err
    assert ("[warmup] search 1/" in err) is on
    assert ("[warmup] phases: collecting subgraphs" in err) is on


def test_a_model_that_returns_its_loss_is_warmed_on_that_loss():
    """`kernelpro warmup` on a library model called with labels= (it returns its loss beside
    its logits, as a dict-like output): the step's backward is that loss's, not the logits'."""
    from kernelpro_backend.warmup.offline import _default_loss

    logits = torch.randn(4, 8, requires_grad=True)
    loss = logits.logsumexp(-1).mean()
    assert _default_loss({"loss": loss, "logits": logits}) is loss

    class Output:
        def __init__(self) -> None:
            self.loss, self.logits = loss, logits

    assert _default_loss(Output()) is loss
    with pytest.raises(TypeError, match="pass loss_fn"):
        _default_loss({"logits": logits})
