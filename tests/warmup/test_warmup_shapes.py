"""Warm-up over several shapes: each shape compiles with static sizes, so every subgraph at
every shape reaches the provider with a key of its own (none symbolic); and a graph that does
turn symbolic says once how to keep kernels per shape."""

from __future__ import annotations

import logging

import pytest
import torch

from kernelpro_backend import make_backend
from kernelpro_backend.rewrite.providers import ReferenceProvider
from kernelpro_backend.warmup.offline import warmup


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.lin(x).relu(), -1)


def test_every_shape_is_searched_with_static_sizes():
    provider = ReferenceProvider()
    shapes = [(torch.randn(8, 16),), (torch.randn(5, 16),), (torch.randn(3, 16),)]
    report = warmup(
        Net(), shapes[0], more_inputs=shapes[1:], provider=provider,
        options={"fallback": "eager", "search": "cache-only"},
    )  # fmt: skip
    assert report.rows and all(r.result != "symbolic" for r in report.rows)
    rows_seen = {sg.output_meta[0][0][0] for sg in provider.provided if sg.graph == "forward"}
    assert {8, 5, 3} <= rows_seen  # one static key per shape, forward (and backward)
    assert {sg.graph for sg in provider.provided} == {"forward", "backward"}


def test_a_symbolic_graph_says_how_to_keep_kernels_per_shape(caplog):
    import kernelpro_backend.rewrite.graph as rewrite

    rewrite._warned_symbolic = False
    compiled = torch.compile(
        Net(),
        backend=make_backend(provider=ReferenceProvider()),
        options={"fallback": "eager", "dynamic_shapes": "off"},
    )
    with caplog.at_level(logging.WARNING, logger="kernelpro"):
        for rows in (8, 5, 3):  # the second shape makes dynamo mark the batch dim dynamic
            with torch.no_grad():
                compiled(torch.randn(rows, 16))
    assert caplog.text.count("kernelpro warmup MODULE:FN --dynamic") == 1


def three_shapes():
    return Net(), torch.randn(8, 16), [torch.randn(5, 16), (torch.randn(3, 16),)]


def test_a_factory_may_name_more_shapes():
    from kernelpro_backend.cli.target import model_inputs_and_shapes

    model, inputs, more = model_inputs_and_shapes(f"{__name__}:three_shapes")
    assert isinstance(model, Net) and inputs[0].shape == (8, 16)
    assert [m[0].shape[0] for m in more] == [5, 3]


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.norm(x) * 2.0, -1)


def _reference_search(found: dict):
    """A searcher whose 'winner' is the subgraph's own reference (loaded by digest), 1 ms faster
    than the fallback: enough to test which sizes a warm-up searches and stores."""
    from kernelpro_backend.cache import KernelArtifact

    def search(subgraph):
        digest = subgraph.key.digest  # its module now: a rewrite erases the nodes it replaces
        found[digest] = (subgraph.module(), subgraph.input_meta)
        return KernelArtifact(
            language="python", source="", entry="reference", launch={"digest": digest},
            kernel_ms=0.01, baselines_ms={"eager": 1.01, "inductor": 1.01},
        )  # fmt: skip

    def load(artifact):
        from kernelpro_backend.rewrite.providers import CallableKernel

        return CallableKernel("reference", found[artifact.launch["digest"]][0])

    return search, load


def _finder(tmp_path, search_on_miss: bool, searcher=None, loader=None):
    from kernelpro_backend.options import Options
    from kernelpro_backend.tuner import KernelFinder

    options = Options.resolve(
        options={
            "cache_dir": str(tmp_path / "cache"),
            "fallback": "eager",
            "search": "on-miss" if search_on_miss else "cache-only",
        }
    )
    return KernelFinder.from_options(options, loader=loader, searcher=searcher)


def test_a_warmup_over_lengths_serves_a_training_loop_that_meets_them(tmp_path):
    from kernelpro_backend.rewrite.dispatch import DISPATCHERS, dispatch_stats

    found: dict = {}
    search, load = _reference_search(found)
    lengths = [64, 128, 256, 200]
    shapes = [(torch.randn(2, n, 16),) for n in lengths]
    torch._dynamo.reset()
    report = warmup(
        Block(), shapes[0], more_inputs=shapes[1:], options={"fallback": "eager"},
        provider=_finder(tmp_path, True, search, load),
    )  # fmt: skip
    searched = {d for _, meta in found.values() for shape, _, _ in meta for d in shape}
    assert set(lengths) <= searched
    assert "covered shapes" in report.table() and "2x200x16: " in report.table()

    # Later, cache-only: a loop over the warmed lengths runs a kernel at every size...
    for _, d in DISPATCHERS.items():
        d.routes.clear()
    torch._dynamo.reset()
    finder = _finder(tmp_path, False, loader=load)
    compiled = torch.compile(
        Block(), backend=make_backend(provider=finder), options={"fallback": "eager"}
    )
    for n in [*lengths, 96]:
        compiled(torch.randn(2, n, 16)).sum().backward()  # as warmed: inputs need no grad
    stats = dispatch_stats()
    assert stats["kernel_calls"] > 0
    # ...and the one length never warmed (96) ran the fallback, recorded with its size.
    assert stats["miss_calls"] > 0
    missed = {
        d for r in finder.cache.misses.entries() for shape, _, _ in r["inputs"] for d in shape
    }
    assert 96 in missed and not set(lengths) & missed


def lengths_factory(seq: int = 8):
    return Net(), torch.randn(seq, 16)


def test_dynamic_ranges_call_the_factory_at_each_bucket_edge():
    from kernelpro_backend.cli.target import dynamic_sizes, model_inputs_over

    assert dynamic_sizes("seq=256:2048") == ("seq", [256, 512, 1024, 2048])
    assert dynamic_sizes("seq=100:300") == ("seq", [100, 128, 256, 300])
    assert dynamic_sizes("seq=5,3") == ("seq", [3, 5])
    model, inputs, more = model_inputs_over(f"{__name__}:lengths_factory", ["seq=4:16"])
    assert isinstance(model, Net)
    assert [inputs[0].shape[0], *(m[0].shape[0] for m in more)] == [4, 8, 16]
    with pytest.raises(SystemExit):
        dynamic_sizes("seq=0:16")


def test_a_loop_whose_first_change_is_to_an_unwarmed_length_still_gets_the_warmed_ones(tmp_path):
    """The symbolic graph is compiled at the length that changed first (200, never warmed): the
    cache knows other lengths of its subgraphs, so they go behind dispatchers anyway and the
    warmed lengths (128, 256) run their kernels; 200 runs the fallback."""
    from kernelpro_backend.rewrite.dispatch import DISPATCHERS

    found: dict = {}
    search, load = _reference_search(found)
    shapes = [(torch.randn(2, n, 16),) for n in (64, 128, 256)]
    torch._dynamo.reset()
    warmup(
        Block(), shapes[0], more_inputs=shapes[1:], options={"fallback": "eager"},
        provider=_finder(tmp_path, True, search, load),
    )  # fmt: skip
    for _, d in DISPATCHERS.items():
        d.routes.clear()
    torch._dynamo.reset()
    compiled = torch.compile(
        Block(), backend=make_backend(provider=_finder(tmp_path, False, loader=load)),
        options={"fallback": "eager"},
    )  # fmt: skip
    for n in (64, 200, 128, 256):
        compiled(torch.randn(2, n, 16)).sum().backward()

    def dims(served: bool) -> set[int]:
        return {
            dim
            for _, d in DISPATCHERS.items()
            for sizes, route in d.routes.items()
            if route.calls and (route.kernel is not None) == served
            for size in sizes
            if not isinstance(size, int)
            for dim in size[0]
        }

    assert {128, 256} <= dims(served=True) and 200 not in dims(served=True)
    assert 200 in dims(served=False)


def test_a_warmup_past_its_search_share_searches_nothing(tmp_path, caplog):
    """deadline_s: the searches stop CHECK_SHARE of the deadline before it (here at once), the
    subgraphs keep the fallback and the log says why."""
    from kernelpro_backend.cache import KernelCache
    from kernelpro_backend.options import Options
    from kernelpro_backend.tuner import KernelFinder

    def must_not_search(subgraph):  # type: ignore[no-untyped-def]
        raise AssertionError("searched past the deadline's search share")

    with KernelCache(tmp_path / "c") as cache:
        # min_gain_us=0: the plan's floor (a kernel's least gain a call) keeps none of this
        # tiny model's subgraphs off the plan, so the deadline is what stops their searches
        options = Options(search="on-miss", min_gain_us=0.0)
        finder = KernelFinder(cache, options, searcher=must_not_search)
        with caplog.at_level(logging.WARNING, logger="kernelpro"):
            report = warmup(
                Net(), (torch.randn(8, 16),), provider=finder, deadline_s=0.0,
                options={"fallback": "eager"},
            )  # fmt: skip
    assert report.rows and all(r.result == "fallback" for r in report.rows)
    assert not finder.searching
    assert caplog.text.count("the search's share of the deadline is spent") == 1
