"""The warm-up collects a step's subgraphs at the keys its compiles will look up: where Inductor
lays the forward channels-last, the backward's saved activations arrive NHWC and its subgraphs
are keyed so (fx_passes/input_strides.py), so the eager collection is redone through Inductor.
CPU: oneDNN off and Inductor's layout optimisation forced, as a CNN's forward goes on a GPU."""

from __future__ import annotations

import logging

import torch
import torch._inductor.config as inductor_config
from helpers import conv_bn_net

from kernelpro_backend.backend import make_backend
from kernelpro_backend.warmup.offline import _step, _step_subgraphs


def _keys(subgraphs) -> set[tuple[str, str]]:
    return {(sg.graph, sg.key.digest) for sg in subgraphs}


def _compiled_keys(model, opts, x) -> set[tuple[str, str]]:
    """The keys the user's own compile of the step looks up."""
    found: set = set()  # keyed as the lookup keys them, before Inductor edits the nodes
    backend = make_backend(observer=lambda _, sgs: found.update(_keys(sgs)))
    _step(model, backend, {**opts, "search": "off"}, True, None, [x], None)
    torch._dynamo.reset()
    return found


def test_a_channels_last_step_is_collected_at_the_keys_its_compiles_look_up(caplog):
    model, x = conv_bn_net(8), torch.randn(2, 3, 8, 8)
    with (
        torch.backends.mkldnn.flags(enabled=False),
        inductor_config.patch(force_layout_optimization=True),
    ):
        torch._dynamo.reset()
        with caplog.at_level(logging.INFO, logger="kernelpro.warmup"):
            collected = _keys(_step_subgraphs(model, {}, True, None, [x], None))
        compiled = _compiled_keys(model, {}, x)
    assert "collected again through it" in caplog.text
    assert {g for g, _ in collected} == {"forward", "backward"}
    assert collected == compiled


def test_a_step_laid_as_traced_is_collected_once_under_eager(caplog):
    model, x = conv_bn_net(8), torch.randn(2, 3, 8, 8)
    with torch.backends.mkldnn.flags(enabled=False):
        torch._dynamo.reset()
        with caplog.at_level(logging.INFO, logger="kernelpro.warmup"):
            collected = _keys(_step_subgraphs(model, {}, True, None, [x], None))
        compiled = _compiled_keys(model, {}, x)
    assert "collected again" not in caplog.text
    assert collected == compiled
