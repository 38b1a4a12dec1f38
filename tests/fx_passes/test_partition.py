"""The partitioner on the three example models, forward and backward."""

from __future__ import annotations

import pytest
import torch
from helpers import subgraphs_of
from torch.fx.passes.utils.fuser_utils import validate_partition

from kernelpro_backend import examples
from kernelpro_backend.fx_passes import partition
from kernelpro_backend.fx_passes.ops import Role, role


def _by_graph(subgraphs, graph):
    return [s for s in subgraphs if s.graph == graph]


def test_mlp_linear_bias_gelu_is_one_subgraph():
    model, (x,) = examples.mlp("cpu")
    sgs = subgraphs_of(model, x)
    fwd = _by_graph(sgs, "forward")
    gelu_gemms = [s for s in fwd if s.kind == "gemm" and "addmm" in s.ops and "erf" in s.ops]
    assert len(gelu_gemms) == 2  # fc1+GELU and fc2+GELU
    norms = [s for s in fwd if s.kind == "reduction" and "var_mean" in s.ops]
    assert len(norms) == 1 and "rsqrt" in norms[0].ops  # the LayerNorm, on its own
    assert not any("erf" in s.ops for s in norms)  # GELU stays in the GEMM epilogue
    bwd = _by_graph(sgs, "backward")
    assert any(s.kind == "gemm" and "mm" in s.ops for s in bwd)
    assert any(s.kind == "reduction" and s.ops == ["sum"] for s in bwd)  # bias gradients


def test_transformer_block_kinds():
    model, (x,) = examples.transformer_block("cpu")
    sgs = subgraphs_of(model, x)
    fwd = _by_graph(sgs, "forward")
    assert [s.pattern for s in fwd if s.kind == "reduction"] == ["rms_norm", "rms_norm"]
    assert sum(s.kind == "attention" for s in fwd) == 1
    # SwiGLU: the gate GEMM carries SiLU (decomposed to neg/exp/add/div) and the multiply.
    assert any(s.kind == "gemm" and {"exp", "div", "mul"} <= set(s.ops) for s in fwd)
    # Residual adds ride in the epilogue of the projection GEMMs.
    assert sum(s.kind == "gemm" and s.ops == ["mm", "add"] for s in fwd) == 2
    bwd = _by_graph(sgs, "backward")
    assert sum(s.kind == "attention" for s in bwd) == 1
    assert sum(s.kind == "gemm" for s in bwd) >= 8
    assert any(s.kind == "reduction" and "sum" in s.ops for s in bwd)


def test_convnet_kinds():
    model, (x,) = examples.convnet("cpu")
    sgs = subgraphs_of(model, x)
    fwd = _by_graph(sgs, "forward")
    assert sum(s.kind == "conv" for s in fwd) == 2
    assert sum(s.kind == "reduction" and "var_mean" in s.ops for s in fwd) == 2  # batchnorms
    assert any(s.kind == "gemm" and "addmm" in s.ops for s in fwd)
    bwd = _by_graph(sgs, "backward")
    assert sum(s.kind == "conv" and "convolution_backward" in s.ops for s in bwd) == 2


@pytest.mark.parametrize("name", sorted(examples.EXAMPLES))
def test_groups_are_disjoint_convex_and_fusable(name):
    model, (x,) = examples.EXAMPLES[name]("cpu")
    graphs = []

    from kernelpro_backend.rewrite import graph as rewrite

    original = rewrite.find_subgraphs

    def spy(gm, kind, precision):
        graphs.append(gm)
        return original(gm, kind, precision)

    rewrite.find_subgraphs = spy
    try:
        subgraphs_of(model, x)
    finally:
        rewrite.find_subgraphs = original
    assert len(graphs) == 2
    for gm in graphs:
        groups = partition(gm.graph)
        seen: set[torch.fx.Node] = set()
        for g in groups:
            assert not (seen & set(g.nodes)), "a node is in two groups"
            seen |= set(g.nodes)
            assert validate_partition(list(g.nodes)), "group would create a cycle"
            anchors = [n for n in g.nodes if role(n) in (Role.GEMM, Role.CONV)]
            assert len(anchors) <= 1
            assert all(role(n) is not Role.OTHER for n in g.nodes)


def test_random_and_mutating_ops_stay_out():
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.dropout(x.relu(), 0.5, training=True) * 2

    sgs = subgraphs_of(M(), torch.randn(8, 8), train=False)
    assert all("native_dropout" not in s.ops and "rand" not in " ".join(s.ops) for s in sgs)


def test_conv_is_the_anchor_of_its_bias_activation_and_residual_tail():
    """conv -> ReLU -> + residual is one conv subgraph (the conv templates' epilogue), forward;
    its backward's convolution_backward keeps its own group."""

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)

        def forward(self, x):  # type: ignore[no-untyped-def]
            return torch.relu(self.conv(x)) + x

    sgs = subgraphs_of(Block(), torch.randn(2, 4, 7, 5, requires_grad=True))
    (conv,) = [s for s in _by_graph(sgs, "forward") if s.kind == "conv"]
    # and the ReLU's mask for the backward (le), stored by the same kernel
    assert conv.ops == ["convolution", "relu", "add", "le"]
    assert any("convolution_backward" in s.ops for s in _by_graph(sgs, "backward"))


class _Rope(torch.nn.Module):
    """Hugging Face's RoPE on the heads of a QKV projection: q*cos + rotate_half(q)*sin, with
    rotate_half(x) = cat((-x[..., d//2:], x[..., :d//2]), -1)."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(64, 192)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, 2, 32).permute(2, 0, 3, 1, 4).unbind(0)
        half = [torch.cat((-t[..., 16:], t[..., :16]), dim=-1) for t in (q, k)]
        q, k = (t * cos + h * sin for t, h in zip((q, k), half, strict=True))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_rope_with_its_cat_is_one_pointwise_subgraph_per_tensor():
    """cat is pointwise by pieces: rotate_half's neg, the cat and the products are one group
    (they were a neg group and a mul-add group with the cat left between them), and the
    backward's slice_scatters of the gradient's halves join the gradient's products."""
    x = torch.randn(2, 8, 64, requires_grad=True)
    sgs = subgraphs_of(_Rope(), x, torch.randn(8, 32), torch.randn(8, 32))
    fwd = [s for s in _by_graph(sgs, "forward") if s.kind == "pointwise"]
    assert [sorted(s.ops) for s in fwd] == [["add", "cat", "mul", "mul", "neg"]] * 2
    bwd = [s for s in _by_graph(sgs, "backward") if "slice_scatter" in s.ops]
    assert len(bwd) == 1 and bwd[0].ops.count("slice_scatter") == 4
    assert not [s for s in _by_graph(sgs, "backward") if s.ops == ["neg"]]
