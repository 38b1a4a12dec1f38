"""Rebuilding subgraphs from their canonical text (fx_passes/rebuild.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import operator

import pytest
import torch
import torch.fx as fx
from helpers import subgraphs_of

from kernelpro_backend import examples
from kernelpro_backend.fx_passes.keys import canonical_order, canonical_text
from kernelpro_backend.fx_passes.rebuild import (
    RebuildError,
    rebuild_module,
    rebuild_subgraph,
    resolve_target,
)

aten = torch.ops.aten


@pytest.fixture(scope="module")
def example_subgraphs():
    found = {}
    for name in ("mlp", "transformer_block", "convnet"):
        torch._dynamo.reset()
        model, inputs = getattr(examples, name)("cpu")
        found[name] = subgraphs_of(model, *inputs)
    torch._dynamo.reset()
    return found


def _assert_bitwise_equal(expected, got, where):
    assert len(expected) == len(got), f"{where}: {len(got)} outputs, expected {len(expected)}"
    for i, (e, g) in enumerate(zip(expected, got, strict=True)):
        assert (g.shape, g.stride(), g.dtype) == (e.shape, e.stride(), e.dtype), f"{where} out {i}"
        torch.testing.assert_close(g, e, rtol=0, atol=0, equal_nan=True, msg=f"{where} out {i}")


def test_every_example_subgraph_rebuilds_bit_for_bit_and_rekeys(example_subgraphs):
    checked = {}
    for name, subgraphs in example_subgraphs.items():
        for index, sg in enumerate(subgraphs):
            where = f"{name} {sg.graph} #{index} {sg.pattern}\n{sg.text}"
            rebuilt = rebuild_module(sg.text, sg.input_meta, "cpu")
            for seed in (0, 7):
                inputs = sg.make_inputs(seed)
                _assert_bitwise_equal(sg.module()(*inputs), rebuilt(*inputs), where)
            again = rebuild_subgraph(sg.text, sg.key, sg.kind, sg.pattern)
            assert again.key == sg.key, where
            assert again.input_meta == sg.input_meta and again.output_meta == sg.output_meta
            assert again.int_ranges == sg.int_ranges, where
            # Re-key from scratch: canonical order recomputed on the rebuilt nodes.
            inputs_, members = canonical_order(again.nodes, again.inputs)
            outs = [n for n in members if any(u.op == "output" for u in n.users)]
            text = canonical_text(inputs_, members, outs)
            assert hashlib.sha256(text.encode()).hexdigest() == sg.key.structure, where
            checked[(name, sg.graph)] = checked.get((name, sg.graph), 0) + 1
    for name in example_subgraphs:
        assert checked.get((name, "forward"), 0) > 0 and checked.get((name, "backward"), 0) > 0
    assert sum(checked.values()) == sum(len(s) for s in example_subgraphs.values())


def _traced(build, metas):
    """A graph built by `build(graph, placeholders)`, with fake meta, as (inputs, members,
    outputs) in canonical order plus the eager module in that order."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    g = fx.Graph()
    ph = [g.placeholder(f"p{i}") for i in range(len(metas))]
    outs = build(g, ph)
    g.output(tuple(outs))
    gm = fx.GraphModule(torch.nn.Module(), g)
    mode = FakeTensorMode()
    with mode:
        fakes = [torch.empty_strided(s, st, dtype=getattr(torch, d)) for s, st, d in metas]
    FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fakes)
    members = [n for n in g.nodes if n.op == "call_function"]
    inputs, ordered = canonical_order(members, ph)
    outputs = [n for n in ordered if n in outs]
    return gm, inputs, ordered, outputs


def test_rebuilds_dtypes_devices_layouts_strings_and_special_floats():
    metas = [((4, 8), (8, 1), "float32"), ((4, 8), (1, 4), "float32")]

    def build(g, ph):
        x, y = ph
        c = g.call_function
        gelu = c(aten.gelu.default, (x,), {"approximate": "tanh"})
        div = c(aten.div.Tensor_mode, (gelu, y), {"rounding_mode": "floor"})
        full = c(
            aten.full.default,
            ([4, 8], 0.5),
            {"dtype": torch.float64, "layout": torch.strided, "device": torch.device("cpu"),
             "pin_memory": False},
        )  # fmt: skip
        wide = c(aten._to_copy.default, (div,), {"dtype": torch.float64})
        clone = c(aten.clone.default, (y,), {"memory_format": torch.contiguous_format})
        clamp = c(aten.clamp.default, (clone, None, 2.5))
        add = c(aten.add.Tensor, (wide, full), {"alpha": 0.25})
        inf = c(aten.mul.Scalar, (clamp, float("inf")))
        nan = c(aten.where.ScalarOther, (c(aten.gt.Scalar, (x, 0.0)), x, float("nan")))
        var = c(aten.var_mean.correction, (x, [1]), {"correction": 0, "keepdim": True})
        mean = c(operator.getitem, (var, 1))
        return [add, inf, nan, mean]

    gm, inputs, members, outputs = _traced(build, metas)
    text = canonical_text(inputs, members, outputs)
    assert '"approximate": "tanh"' in text and "torch.float64" in text and '"inf"' in text
    rebuilt = rebuild_module(text, [metas[int(p.name[1:])] for p in inputs], "cpu")
    # Reference in canonical order: the original module with its inputs permuted the same way.
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 8, generator=gen)
    y = torch.randn(8, 4, generator=gen).t()
    by_name = {"p0": x, "p1": y}
    by_output = dict(zip(_output_names(gm), gm(x, y), strict=True))
    expected = [by_output[o.name] for o in outputs]
    _assert_bitwise_equal(expected, rebuilt(*[by_name[p.name] for p in inputs]), text)
    kwargs = {n.target: n.kwargs for n in rebuilt.graph.nodes if n.op == "call_function"}
    assert kwargs[aten.gelu.default] == {"approximate": "tanh"}
    assert kwargs[aten.full.default]["device"] == torch.device("cpu")
    assert kwargs[aten.clone.default]["memory_format"] is torch.contiguous_format


def _output_names(gm):
    (out,) = [n for n in gm.graph.nodes if n.op == "output"]
    return [n.name for n in out.args[0]]


def test_a_string_slot_keeps_float_like_text_and_devices_move_to_the_target():
    text = (
        'v0 = aten::gelu.default["%in0"] {"approximate": "tanh"}\n'
        'v1 = aten::full.default[[2], "1.5"] {"device": "device:cuda", "dtype": "torch.float32"}\n'
        "return v0, v1"
    )
    gm = rebuild_module(text, [((2,), (1,), "float32")], "cpu", recorded_device="cuda")
    v0, v1 = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert v0.kwargs["approximate"] == "tanh"
    assert v1.args[1] == 1.5 and isinstance(v1.args[1], float)
    assert v1.kwargs["device"] == torch.device("cpu") and v1.kwargs["dtype"] is torch.float32
    x = torch.tensor([0.5, -1.0])
    got = gm(x)
    assert torch.equal(got[0], aten.gelu.default(x, approximate="tanh"))
    assert torch.equal(got[1], torch.full((2,), 1.5))


@pytest.mark.parametrize(
    "name",
    ["os.system", "builtins.eval", "__class__::__init__.__globals__", "aten::no_such_op.default",
     "aten::mm.no_such_overload", "mm"],
)  # fmt: skip
def test_refuses_targets_that_are_not_torch_ops(name):
    with pytest.raises(RebuildError):
        resolve_target(name)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('v0 = aten::relu.default["%in1"] {}\nreturn v0', "before it is defined"),
        ('v1 = aten::relu.default["%in0"] {}\nreturn v1', "where v0 was expected"),
        ('v0 = aten::relu.default["%in0"] {}', "must end with"),
        ('v0 = aten::relu.default["%in0"] {}\nreturn v3', "unknown nodes"),
        ('v0 = aten::relu.default["%in0"] {"nope": 1}\nreturn v0', "no argument named"),
        ('v0 = aten::add.Tensor["%in0", "sym:s0"] {}\nreturn v0', "symbolic"),
        ('v0 = aten::add.Tensor["%in0", "banana"] {}\nreturn v0', "cannot decode"),
        ('v0 = aten::mm.default["%in0", "%in0"] {}\nreturn v0', "does not run"),
    ],
)
def test_malformed_text_raises_rebuild_error(text, message):
    with pytest.raises(RebuildError, match=message):
        rebuild_module(text, [((2, 3), (3, 1), "float32")], "cpu")


def test_rebuild_subgraph_checks_the_structure_hash(example_subgraphs):
    sg = example_subgraphs["mlp"][0]
    with pytest.raises(RebuildError, match="does not hash"):
        rebuild_subgraph(sg.text.replace("erf", "exp"), sg.key)
    wrong = dataclasses.replace(sg.key, structure="0" * 64)
    with pytest.raises(RebuildError, match="does not hash"):
        rebuild_subgraph(sg.text, wrong)
