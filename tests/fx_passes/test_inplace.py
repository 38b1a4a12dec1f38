"""A write in place is found through any view of the value it writes, by op (a trailing
underscore, an in-place operator, `out=`), and nothing else counts as one."""

from __future__ import annotations

import torch

from kernelpro_backend.fx_passes.inplace import InPlaceWrites


def _graphs(fn, *inputs):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=backend, fullgraph=True)(*inputs)
    return graphs


def _untouched(fn) -> dict[str, bool]:
    (gm,) = _graphs(fn, torch.ones(4, 4), torch.ones(4))
    writes = InPlaceWrites(gm.graph)
    return {n.name: writes.untouched(n) for n in gm.graph.nodes if n.op == "placeholder"}


def test_a_write_through_a_view_of_a_view_marks_the_base():
    def fn(a, b):
        a[1:][0].fill_(0.0)
        return a + b

    assert _untouched(fn) == {"l_a_": False, "l_b_": True}


def test_setitem_and_out_are_writes_and_out_of_place_ops_are_not():
    def setitem(a, b):
        a[..., 0, 1] = 2.0
        return a.sum() + b.add(1).sum()

    def out(a, b):
        torch.add(b, 1, out=b)
        return (a.bool() & a.bool()).sum() + b.sum()

    assert _untouched(setitem) == {"l_a_": False, "l_b_": True}
    assert _untouched(out) == {"l_a_": True, "l_b_": False}
