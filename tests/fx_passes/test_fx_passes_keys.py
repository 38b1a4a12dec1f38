"""Subgraph keys and standalone reference extraction."""

from __future__ import annotations

import pytest
import torch
import torch.fx as fx
from helpers import subgraphs_of

from kernelpro_backend.fx_passes import find_subgraphs

aten = torch.ops.aten


def _graph(order: str, shape=(4, 8), dtype=torch.float32, stride=None, names=("a", "b")):
    """x*2 -> exp and y+1 -> relu (two unrelated chains) feeding one add; built in two node
    orders with different node names."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    g = fx.Graph()
    x = g.placeholder(names[0])
    y = g.placeholder(names[1])
    with mode:
        base = torch.empty_strided(shape, stride or (shape[1], 1), dtype=dtype)
    x.meta["val"] = base
    y.meta["val"] = base
    nodes = {}

    def mk(name, target, args):
        n = g.call_function(target, args)
        n.name = f"{names[0]}_{name}"
        nodes[name] = n
        return n

    if order == "xy":
        mk("m", aten.mul.Tensor, (x, 2.0))
        mk("e", aten.exp.default, (nodes["m"],))
        mk("p", aten.add.Tensor, (y, 1.0))
        mk("r", aten.relu.default, (nodes["p"],))
    else:
        mk("p", aten.add.Tensor, (y, 1.0))
        mk("m", aten.mul.Tensor, (x, 2.0))
        mk("r", aten.relu.default, (nodes["p"],))
        mk("e", aten.exp.default, (nodes["m"],))
    mk("s", aten.add.Tensor, (nodes["e"], nodes["r"]))
    g.output((nodes["s"],))
    with mode:
        for n in g.nodes:
            if n.op == "call_function":
                args = [a.meta["val"] if isinstance(a, fx.Node) else a for a in n.args]
                n.meta["val"] = n.target(*args)
    return fx.GraphModule(torch.nn.Module(), g)


def _key(gm):
    (sg,) = find_subgraphs(gm, "forward")
    return sg.key


def test_key_ignores_names_and_unrelated_order():
    a = _key(_graph("xy", names=("a", "b")))
    b = _key(_graph("yx", names=("q", "r")))
    assert a == b and a.digest == b.digest


def test_key_changes_with_shape_stride_dtype():
    base = _key(_graph("xy"))
    assert _key(_graph("xy", shape=(4, 9))) != base
    assert _key(_graph("xy", stride=(1, 4))) != base
    assert _key(_graph("xy", dtype=torch.bfloat16)) != base


def test_key_changes_with_structure():
    (sg,) = find_subgraphs(_graph("xy"), "forward")
    other = _graph("xy")
    for n in other.graph.nodes:
        if n.target is aten.exp.default:
            n.target = aten.tanh.default
    (sg2,) = find_subgraphs(other, "forward")
    assert sg.key.inputs == sg2.key.inputs and sg.key != sg2.key


def test_key_is_fixed_when_the_subgraph_is_made():
    # Inductor edits a graph's nodes in place before its codegen (view -> reshape); the key a
    # rewrite looked up must stay the subgraph's key, also through dataclasses.replace.
    import dataclasses

    gm = _graph("xy")
    (sg,) = find_subgraphs(gm, "forward")
    key, text = sg.key, sg.text
    for n in gm.graph.nodes:
        if n.target is aten.exp.default:
            n.target = aten.tanh.default
    (edited,) = find_subgraphs(gm, "forward")
    assert edited.key != key  # the edit changes what a new subgraph is keyed by
    assert sg.key == key and sg.text == text
    hinted = dataclasses.replace(sg, hints=(("pointwise", ()),))
    assert hinted.key == key and hinted.text == text


def test_a_subgraph_without_static_input_values_says_why_it_has_no_key():
    gm = _graph("xy")
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            del n.meta["val"]
    (sg,) = find_subgraphs(gm, "forward")
    assert sg.symbolic
    with pytest.raises(ValueError, match="no key; it stays with the fallback"):
        sg.key  # noqa: B018 (a property that raises)


def test_key_json_roundtrip():
    key = _key(_graph("xy"))
    from kernelpro_backend.fx_passes import SubgraphKey

    assert SubgraphKey.from_json(key.to_json()) == key


def test_precision_is_part_of_the_key():
    gm = _graph("xy")
    (ieee,) = find_subgraphs(gm, "forward", "ieee")
    (tf32,) = find_subgraphs(gm, "forward", "tf32")
    assert ieee.key != tf32.key


def test_reference_module_matches_the_model_piece():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(24, 40)

        def forward(self, x):
            return torch.nn.functional.gelu(self.lin(x))

    m = M()
    x = torch.randn(5, 24)
    sgs = subgraphs_of(m, x, train=False)
    gemm = next(s for s in sgs if s.kind == "gemm")
    assert "erf" in gemm.ops
    inputs = gemm.make_inputs(seed=3)
    for t, (shape, stride, dtype) in zip(inputs, gemm.input_meta, strict=True):
        assert (
            tuple(t.shape) == shape
            and tuple(t.stride()) == stride
            and str(t.dtype) == f"torch.{dtype}"
        )
        assert t.abs().sum() > 0
    (out,) = gemm.module()(*inputs)
    # Recompute by hand from the canonical inputs: find weight (40x24), input (5x24), bias (40).
    by_shape = {tuple(t.shape): t for t in inputs}
    w, xi, b = by_shape[(40, 24)], by_shape[(5, 24)], by_shape[(40,)]
    expected = torch.nn.functional.gelu(xi @ w.t() + b)
    torch.testing.assert_close(out, expected)
    # Fresh seeds give fresh inputs.
    assert not torch.equal(gemm.make_inputs(seed=4)[0], inputs[0])
