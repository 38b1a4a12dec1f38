"""A subgraph leaves out its views of outside values that are read outside too
(fx_passes/subgraph.py `_outside_views`): a kernel returning such a view would copy the outside
tensor (BERT's MLM head: the logits' view returned beside their float32 copy)."""

from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from kernelpro_backend.fx_passes.group import Group
from kernelpro_backend.fx_passes.ops import op_name
from kernelpro_backend.fx_passes.subgraph import subgraph_of_group


def _head(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    logits = x.view(2, 3, 10)  # returned, as Hugging Face returns its logits
    return logits, logits.view(-1, 10).float()


def _group(fn, *args):  # type: ignore[no-untyped-def]
    gm = make_fx(fn, tracing_mode="fake")(*args)
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    return gm, Group(nodes=nodes, mask=0)


def test_a_returned_view_of_an_input_stays_outside_and_is_read_by_the_subgraph():
    gm, group = _group(_head, torch.randn(6, 10, dtype=torch.bfloat16))
    sg = subgraph_of_group(group, "forward", "ieee")
    assert [op_name(n) for n in sg.outputs] == ["aten::_to_copy"]
    assert [op_name(n) for n in sg.inputs] == ["aten::view"]  # the returned view, read
    x = torch.randn(6, 10, dtype=torch.bfloat16)
    (got,) = sg.module()(x.view(2, 3, 10))
    torch.testing.assert_close(got, x.float())


def test_a_view_of_a_computed_value_and_an_inside_only_view_stay_in():
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = (x * 2).view(2, 3, 10)  # a view of a member: the kernel writes y once
        return y, x.view(-1).float()  # x.view is read inside only

    gm, group = _group(fn, torch.randn(6, 10, dtype=torch.bfloat16))
    sg = subgraph_of_group(group, "forward", "ieee")
    assert len(group.nodes) == 4 and len(sg.nodes) == 4


def test_a_group_of_views_alone_is_left_whole():
    gm, group = _group(lambda x: (x.view(60), x.view(6, 10).t()), torch.randn(6, 10))
    sg = subgraph_of_group(group, "forward", "ieee")
    assert len(sg.nodes) == len(group.nodes)
