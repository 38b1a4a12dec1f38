"""Attention's unset random-number state: a training forward's efficient attention returns
its philox seed and offset, saved for the backward, which without dropout neither writes nor
reads them. Zeroed, the attention subgraph outputs only what its kernels compute, and lowers."""

from __future__ import annotations

import operator

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from kernelpro_backend.fx_passes import find_subgraphs
from kernelpro_backend.fx_passes.rng_outputs import zero_unset_rng_outputs, zeros_node
from kernelpro_backend.lowering import lower

aten = torch.ops.aten


def training_forward(dropout: float) -> torch.fx.GraphModule:
    """A forward as AOTAutograd leaves it: the output, and what the backward saves."""

    def fwd(q: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out, lse, seed, offset = aten._scaled_dot_product_efficient_attention(
            q, q, q, bias, True, dropout, False
        )
        return out, lse, seed, offset

    q = torch.empty(2, 3, 40, 16, dtype=torch.bfloat16, device="meta")
    bias = torch.empty(2, 3, 40, 40, dtype=torch.bfloat16, device="meta")
    return make_fx(fwd, tracing_mode="fake")(q, bias)


def getitems(gm: torch.fx.GraphModule) -> list[int]:
    return sorted(n.args[1] for n in gm.graph.nodes if n.target is operator.getitem)


def test_without_dropout_the_state_is_zeros_and_the_forward_lowers() -> None:
    gm = training_forward(0.0)
    before = [s for s in find_subgraphs(gm, "forward") if s.pattern == "sdpa"]
    assert len(before) == 1 and len(before[0].outputs) == 4
    assert zero_unset_rng_outputs(gm) == 2
    assert getitems(gm) == [0, 1]
    outputs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    zeros = [o for o in outputs if o.target is aten.full.default]
    assert [tuple(z.meta["val"].shape) for z in zeros] == [(), ()]
    assert all(z.meta["val"].dtype == torch.int64 for z in zeros)
    (sg,) = [s for s in find_subgraphs(gm, "forward") if s.pattern == "sdpa"]
    spec = lower(sg)
    assert spec.template == "attention" and spec.param("bias") is not None


def test_with_dropout_nothing_changes() -> None:
    gm = training_forward(0.1)
    assert zero_unset_rng_outputs(gm) == 0
    assert getitems(gm) == [0, 1, 2, 3]


def test_the_zeros_compile_under_inductor_past_its_decompositions() -> None:
    """The pass runs on graphs Inductor has decomposed; its node must lower there as it is
    (`aten.zeros` failed on the H100: "both a fallback and a decomp for same op")."""
    from torch._inductor.compile_fx import compile_fx_inner

    x = torch.randn(8)
    gm = make_fx(lambda x: (x * 2, x.sum()))(x)
    graph = gm.graph
    output = next(n for n in graph.nodes if n.op == "output")
    likes = (torch.empty((), dtype=torch.int64), torch.empty(2, dtype=torch.uint64))
    made = []
    for like in likes:
        with graph.inserting_before(output):
            node = zeros_node(graph, like)
        node.meta["val"] = like
        made.append(node)
    output.args = ((*output.args[0], *made),)
    gm.recompile()
    for node in graph.nodes:  # Inductor reads every node's fake value
        if "val" not in node.meta and node.op != "output":
            node.meta["val"] = torch.empty(8) if node.op == "placeholder" else None
    got = compile_fx_inner(gm, [x])([x])
    assert torch.equal(got[0], x * 2)
    for g, like in zip(got[2:], likes, strict=True):
        assert g.dtype == like.dtype and g.shape == like.shape and not g.any()
