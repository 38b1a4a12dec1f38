"""Lowering a depthwise convolution's backward (lowering/lower_conv_bwd.py): found in a trained
nn.Conv2d(groups=C) as `kernelpro explain` finds it, it lowers to the direct template (it was
refused and left to cuDNN), and the kernel built from it gives eager autograd's gradients."""

from __future__ import annotations

import operator

import torch
import torch.nn as nn

from kernelpro_backend.explain import find_subgraphs
from kernelpro_backend.lowering import lower
from kernelpro_backend.runtime.spec_kernel import build_kernel


def test_depthwise_backward_lowers_and_matches_eager_autograd() -> None:
    torch.manual_seed(0)
    conv = nn.Conv2d(6, 6, 5, stride=2, padding=2, groups=6)
    x = torch.randn(3, 6, 13, 11, requires_grad=True)
    found = find_subgraphs(conv, x, train=True)
    (sg,) = [s for s in found if s.kind == "conv" and s.graph == "backward"]
    spec = lower(sg)
    assert spec.template == "conv_depthwise_backward"
    assert {w for w, _ in spec.param("grads")} == {1, 2}

    gm = sg.module()
    (node,) = [n for n in gm.graph.nodes if "convolution_backward" in str(n.target)]
    places = [n for n in gm.graph.nodes if n.op == "placeholder"]
    dy = torch.randn_like(conv(x))
    inputs = [torch.empty(0)] * len(places)
    for arg, value in zip(node.args[:3], (dy, x.detach(), conv.weight.detach()), strict=True):
        inputs[places.index(arg)] = value
    got = build_kernel(spec)(*inputs)

    eager = torch.autograd.grad(conv(x), (x, conv.weight, conv.bias), dy)
    (out,) = [n for n in gm.graph.nodes if n.op == "output"]
    for value, picked in zip(got, out.args[0], strict=True):
        assert picked.target is operator.getitem and picked.args[0] is node
        torch.testing.assert_close(value, eager[picked.args[1]], rtol=1e-5, atol=1e-5)
