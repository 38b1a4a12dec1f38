"""A graph's values follow its inputs' real strides (fx_passes/input_strides.py): a channels-last
training step's backward receives its saved activations NHWC while AOTAutograd traced them
NCHW. CPU: oneDNN off and Inductor's layout optimisation forced, so the forward goes
channels-last as a CNN's does on a GPU."""

from __future__ import annotations

import logging

import torch
import torch._inductor.config as inductor_config
import torch.fx as fx
from helpers import conv_bn_net
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from kernelpro_backend.backend import make_backend
from kernelpro_backend.fx_passes.input_strides import match_input_strides


def _channels_last(meta) -> bool:
    """An activation laid NHWC (not a broadcast one, nor one whose layouts coincide)."""
    shape, stride, _ = meta
    if len(shape) != 4 or shape[1] == 1 or shape[2] * shape[3] == 1:
        return False
    return stride == torch._prims_common.make_channels_last_strides_for(shape)


def test_a_channels_last_steps_backward_subgraphs_see_their_activations_nhwc():
    """Without the pass every backward subgraph was keyed and specified NCHW, the strides
    AOTAutograd traced, while Inductor's forward returned the saved activations NHWC."""
    model, x = conv_bn_net(), torch.randn(4, 3, 16, 16)
    found: list = []
    torch._dynamo.reset()
    backend = make_backend(observer=lambda kind, sgs: found.extend((kind, s) for s in sgs))
    with (
        torch.backends.mkldnn.flags(enabled=False),
        inductor_config.patch(force_layout_optimization=True),
    ):
        compiled = torch.compile(model, backend=backend, options={"search": "off"})
        compiled(x).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for got, want in zip(grads, [p.grad for p in model.parameters()], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    backward = [sg for kind, sg in found if kind == "backward"]
    assert backward
    laid = [m for sg in backward for m in (*sg.input_meta, *sg.output_meta) if _channels_last(m)]
    assert laid, [sg.input_meta for sg in backward]


def _traced(x: torch.Tensor) -> tuple[fx.GraphModule, FakeTensorMode]:
    mode = FakeTensorMode()
    with mode:
        fake = mode.from_tensor(x)
        gm = make_fx(lambda t: torch.relu(t) * 2 + 1)(fake)
    return gm, mode


def test_values_are_propagated_again_from_restrided_inputs():
    gm, mode = _traced(torch.randn(2, 8, 4, 4))
    last = [n for n in gm.graph.nodes if n.op == "call_function"][-1]
    assert last.meta["val"].stride() == (128, 16, 4, 1)
    with mode:
        arrives = torch.empty(2, 8, 4, 4).to(memory_format=torch.channels_last)
    assert match_input_strides(gm, [arrives]) == [next(iter(gm.graph.nodes)).name]
    assert last.meta["val"].stride() == (128, 1, 32, 8)


def test_a_graph_whose_inputs_arrive_as_traced_is_left_alone():
    gm, mode = _traced(torch.randn(2, 8, 4, 4))
    before = {n: n.meta.get("val") for n in gm.graph.nodes}
    with mode:
        arrives = torch.empty(2, 8, 4, 4)
    assert match_input_strides(gm, [arrives]) == []
    assert all(n.meta.get("val") is v for n, v in before.items())
    # another shape (not a restriding) or a non-dense input: nothing to propagate either
    with mode:
        assert match_input_strides(gm, [torch.empty(2, 8, 4, 5)]) == []
        assert match_input_strides(gm, [torch.empty(2, 8, 4, 8)[..., ::2]]) == []


def _refuses_channels_last(t: torch.Tensor) -> torch.Tensor:
    if not t.is_contiguous():
        raise RuntimeError("needs NCHW")
    return t + 1


def test_a_failed_propagation_keeps_the_traced_values_and_says_so(caplog):
    gm, mode = _traced(torch.randn(2, 8, 4, 4))
    last = [n for n in gm.graph.nodes if n.op == "call_function"][-1]
    with gm.graph.inserting_after(last):
        extra = gm.graph.call_function(_refuses_channels_last, (last,))
    extra.meta["val"] = last.meta["val"]
    before = {n: n.meta.get("val") for n in gm.graph.nodes}
    with mode:
        arrives = torch.empty(2, 8, 4, 4).to(memory_format=torch.channels_last)
    with caplog.at_level(logging.WARNING, logger="kernelpro"):
        assert match_input_strides(gm, [arrives]) == []
    assert all(n.meta.get("val") is v for n, v in before.items())
    assert "left at their traced strides" in caplog.text and "needs NCHW" in caplog.text
