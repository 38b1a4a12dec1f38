"""The warm-up's search plan (tuner/plan.py) on fake subgraphs with known shapes: identical keys
grouped and counted, descending estimated gain, the floor, keys known already, the budgets."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from kernelpro_backend.tuner import plan as plan_module
from kernelpro_backend.tuner.plan import (
    FALLBACK_ATTAINS,
    MIN_SEARCH_S,
    Estimate,
    kernels_attain,
    plan_searches,
    planning_ceilings,
    round_trip_bytes,
    search_budget_s,
)

CEILINGS = planning_ceilings(None)  # the H100 datasheet's roofs, as off the GPU


@dataclasses.dataclass
class Fake:
    """A pointwise subgraph reading and writing one float32 [rows, 1024] tensor."""

    name: str
    rows: int
    symbolic: bool = False
    pattern: str = "pointwise"
    precision: str = "ieee"
    nodes: tuple = ()
    outputs: tuple = ()

    @property
    def input_meta(self):
        return [((self.rows, 1024), (1024, 1), "float32")]

    @property
    def output_meta(self):
        return self.input_meta


def _plan(subgraphs, floor_ms=0.0, **kw):
    return plan_searches(subgraphs, lambda sg: sg.name, CEILINGS, floor_ms, **kw)


def test_the_plan_groups_identical_keys_and_orders_them_by_estimated_gain():
    # 24 layers of a 2048-row key outweigh one 16384-row key (8 MB read and written each);
    # a 4096-row key met first comes after both
    layers = [Fake("layer", 2048) for _ in range(24)]
    plan = _plan([Fake("head", 4096), *layers, Fake("proj", 16384)])
    assert [(i.digest, i.count) for i in plan.planned] == [
        ("layer", 24),
        ("proj", 1),
        ("head", 1),
    ]
    assert plan.occurrences == 26 and plan.counts()["distinct"] == 3
    layer = plan.planned[0]
    bound = 2 * 2048 * 1024 * 4 / CEILINGS.dram_bytes_per_s * 1e3
    assert abs(layer.estimate.sol_ms - bound) < 1e-9
    assert abs(layer.gain_ms - 24 * bound * (1 / FALLBACK_ATTAINS - 1)) < 1e-9


def test_the_floor_skips_keys_whose_gain_a_call_is_too_small_and_says_why():
    big, tiny = Fake("big", 16384), Fake("tiny", 8)
    plan = _plan([tiny, big, tiny], floor_ms=0.002)
    assert [i.digest for i in plan.planned] == ["big"]
    (skipped,) = plan.others
    assert skipped.digest == "tiny" and skipped.status == "below floor" and skipped.count == 2
    assert "under the 2.0 us a kernel must save to be used" in skipped.why
    assert plan.counts()["below_floor"] == 1


def test_known_keys_symbolic_and_unselected_subgraphs_are_not_planned():
    subgraphs = [
        Fake("cached", 16384),
        Fake("before", 16384),
        Fake("other", 16384, pattern="softmax"),
        Fake("dyn", 16384, symbolic=True),
        Fake("new", 16384),
    ]
    known = {"cached": "cached", "before": "searched before"}
    plan = _plan(subgraphs, known=known.get, selected=lambda sg: sg.pattern == "pointwise")
    assert [i.digest for i in plan.planned] == ["new"]
    assert {i.digest: i.status for i in plan.others} == {
        "cached": "cached",
        "before": "searched before",
        "other": "not selected",
    }
    assert plan.occurrences == 4  # the symbolic one is searched per size at run time


def test_the_fallback_reads_back_an_extern_gemm_output_its_epilogue_uses():
    gm = make_fx(lambda a, b: torch.relu(torch.mm(a, b)))(torch.randn(64, 32), torch.randn(32, 16))
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    mm, relu = nodes
    inner = dataclasses.replace(Fake("g", 1), nodes=tuple(nodes), outputs=(relu,))
    assert round_trip_bytes(inner) == 2 * 64 * 16 * 4  # written by cuBLAS, read by the relu
    both = dataclasses.replace(inner, outputs=(mm, relu))
    assert round_trip_bytes(both) == 64 * 16 * 4  # written anyway: only the read is extra
    alone = dataclasses.replace(inner, nodes=(mm,), outputs=(mm,))
    assert round_trip_bytes(alone) == 0


def test_each_search_gets_its_share_of_the_time_left_within_the_bounds():
    assert search_budget_s(1.0, 2.0, None, 120.0) == 120.0  # no deadline: the full budget
    assert search_budget_s(1.0, 2.0, 100.0, 120.0) == 50.0  # half the gain left: half the time
    assert search_budget_s(1.0, 100.0, 300.0, 120.0) == MIN_SEARCH_S  # at least the least
    assert search_budget_s(9.0, 10.0, 600.0, 120.0) == 120.0  # at most budget_s
    assert search_budget_s(1.0, 10.0, MIN_SEARCH_S - 1, 120.0) is None  # too late to start
    assert search_budget_s(1.0, 10.0, 6.0, 5.0) == 5.0  # a budget under the least is kept


def test_a_bigger_estimate_gets_a_bigger_budget(monkeypatch):
    monkeypatch.setattr(plan_module, "MIN_SEARCH_S", 1.0)
    small = search_budget_s(0.1, 1.0, 300.0, 120.0)
    large = search_budget_s(0.5, 1.0, 300.0, 120.0)
    assert small is not None and large is not None and large > small


def test_the_estimate_is_the_fallback_at_its_share_of_the_roofs():
    e = Estimate.of(Fake("x", 4096), CEILINGS)
    assert abs(e.fallback_ms * FALLBACK_ATTAINS - e.sol_ms) < 1e-12
    assert e.gain_ms > 0


def test_the_copies_around_any_kernel_count_in_its_bound():
    """A pointwise subgraph's fallback moves its 32 MB at 70% of the roof; a kernel moves them
    at 100% but, in a channels-last graph, also pays a copy of its input (32 MB read and
    written): the copies leave it no gain, so its search is not planned."""
    sg = Fake("x", 8192)
    moved = 2 * 8192 * 1024 * 4
    plain, copied = Estimate.of(sg, CEILINGS), Estimate.of(sg, CEILINGS, copies=moved)
    assert copied.fallback_ms == plain.fallback_ms and copied.sol_ms > plain.sol_ms
    assert plain.gain_ms > 0 and copied.gain_ms == 0
    plan = _plan([sg, Fake("y", 8192)], floor_ms=1e-6, copies=lambda s: moved * (s.name == "x"))
    assert [i.digest for i in plan.planned] == ["y"]
    assert [(i.digest, i.status) for i in plan.others] == [("x", "below floor")]


def test_a_library_calls_measured_time_lifts_the_fallbacks_estimate():
    """Two keys of one roofline estimate: the one whose library calls measured slow (cuDNN's
    depthwise backward at 6% of its roof) promises more and is searched first; the measure is
    asked only of keys that would be searched."""
    a, b, c = Fake("a", 4096), Fake("b", 4096), Fake("cached", 4096)
    roofline = Estimate.of(a, CEILINGS).fallback_ms
    asked: list = []

    def measured(sg):
        asked.append(sg.name)
        return 10 * roofline if sg.name == "b" else roofline / 10

    plan = _plan(
        [a, b, c],
        known=lambda d: "cached" if d == "cached" else None,
        measured=measured,
    )
    assert [i.digest for i in plan.planned] == ["b", "a"]
    assert plan.planned[0].estimate.fallback_ms == pytest.approx(10 * roofline)
    assert plan.planned[1].estimate.fallback_ms == pytest.approx(roofline)  # never below it
    assert sorted(asked) == ["a", "b"]


def test_a_convolution_promises_only_what_kernelpro_s_conv_kernels_reach():
    """Convolution templates reach 14-43% of the bound (KERNELS_ATTAIN): a dense conv whose
    library call runs at 57% of it (ResNet-50's backward, every search of which lost) is not
    planned; a depthwise one the library runs at 5% is, ahead of the pointwise key."""
    sol = Estimate.of(Fake("x", 4096), CEILINGS).sol_ms
    dense = Fake("dense", 4096, pattern="convolution_backward+epilogue")
    depthwise = Fake("depthwise", 4096, pattern="convolution_backward")
    pointwise = Fake("pointwise", 4096)
    library = {"dense": sol / 0.57, "depthwise": sol / 0.05}
    assert kernels_attain(dense.pattern) == kernels_attain("convolution+epilogue") < 0.5
    assert kernels_attain("mm+epilogue") == 1.0
    plan = _plan([dense, depthwise, pointwise], floor_ms=1e-6,
                 measured=lambda sg: library.get(sg.name))  # fmt: skip
    assert [i.digest for i in plan.planned] == ["depthwise", "pointwise"]
    assert [(i.digest, i.status) for i in plan.others] == [("dense", "below floor")]
    attain = kernels_attain(depthwise.pattern)
    assert plan.planned[0].estimate.gain_ms == pytest.approx(sol / 0.05 - sol / attain)


def test_attention_promises_what_the_templates_reach():
    """The attention templates reach 33% (forward) and 24% (backward) of the bound: the
    efficient kernels with a bias at 11% are planned, flash attention at 43% is not."""
    sol = Estimate.of(Fake("x", 4096), CEILINGS).sol_ms
    biased = Fake("biased", 4096, pattern="sdpa")
    flash = Fake("flash", 4096, pattern="sdpa")
    backward = Fake("backward", 4096, pattern="sdpa_backward")
    library = {"biased": sol / 0.11, "flash": sol / 0.43, "backward": sol / 0.11}
    assert kernels_attain("sdpa") > kernels_attain("sdpa_backward") > 0.2
    plan = _plan([biased, flash, backward], floor_ms=1e-6,
                 measured=lambda sg: library.get(sg.name))  # fmt: skip
    assert sorted(i.digest for i in plan.planned) == ["backward", "biased"]
    assert [(i.digest, i.status) for i in plan.others] == [("flash", "below floor")]
    assert plan.planned[0].estimate.gain_ms == pytest.approx(sol / 0.11 - sol / 0.33)
