"""Warm-up over several shapes: each shape compiles with static sizes, so every subgraph at
every shape reaches the provider with a key of its own (none symbolic); and a graph that does
turn symbolic says once how to keep kernels per shape."""

from __future__ import annotations

import logging

import torch

from kernelpro_backend import make_backend
from kernelpro_backend.providers import ReferenceProvider
from kernelpro_backend.warmup import warmup


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
    import kernelpro_backend.rewrite as rewrite

    rewrite._warned_symbolic = False
    compiled = torch.compile(
        Net(), backend=make_backend(provider=ReferenceProvider()), options={"fallback": "eager"}
    )
    with caplog.at_level(logging.WARNING, logger="kernelpro"):
        for rows in (8, 5, 3):  # the second shape makes dynamo mark the batch dim dynamic
            with torch.no_grad():
                compiled(torch.randn(rows, 16))
    assert caplog.text.count("dynamic=False") == 1


def three_shapes():
    return Net(), torch.randn(8, 16), [torch.randn(5, 16), (torch.randn(3, 16),)]


def test_a_factory_may_name_more_shapes():
    from kernelpro_backend.cli.target import model_inputs_and_shapes

    model, inputs, more = model_inputs_and_shapes(f"{__name__}:three_shapes")
    assert isinstance(model, Net) and inputs[0].shape == (8, 16)
    assert [m[0].shape[0] for m in more] == [5, 3]
