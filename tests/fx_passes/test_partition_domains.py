"""A group holds one domain: no output larger than its anchor's or its reductions' rows, and
no two tensors of other sizes tied only by a scalar they both read. Either would make the
lowering refuse the whole group (GPT's last LayerNorm backward, a classifier's GEMM with the
average pool's backward), so the search never saw those subgraphs."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch._inductor.decomposition import select_decomp_table
from torch.fx.experimental.proxy_tensor import make_fx

from kernelpro_backend.bench.workloads import WORKLOADS
from kernelpro_backend.explain import find_subgraphs
from kernelpro_backend.fx_passes import find_subgraphs as graph_subgraphs
from kernelpro_backend.lowering import lower

sys.path.insert(0, str(Path(__file__).parents[1] / "codegen"))
from harness import check  # noqa: E402


def _subgraphs(fn, *inputs):  # type: ignore[no-untyped-def]
    gm = make_fx(fn, tracing_mode="fake", decomposition_table=select_decomp_table())(*inputs)
    return graph_subgraphs(gm, "inference")


def test_a_scalar_does_not_tie_tensors_of_two_sizes_into_one_group():
    """s = g * c scales activations [T, d] (then centred along d) and a weight gradient
    [V, d]: two groups, each of one domain, both lowered and matching."""

    def fn(g, c, x, gw):  # type: ignore[no-untyped-def]
        s = g * c
        a = s * x
        return a - a.mean(-1, keepdim=True), s * gw

    inputs = (torch.randn(()), torch.randn(()), torch.randn(6, 24), torch.randn(40, 24))
    sgs = _subgraphs(fn, *inputs)
    sizes = [{m[0] for m in sg.output_meta} - {()} for sg in sgs]  # the scalar s may be one
    assert sorted(map(sorted, sizes)) == [[(6, 24)], [(40, 24)]]
    for seed, sg in enumerate(sgs):
        check(sg, lower(sg), seed=seed)


def test_a_gemm_keeps_no_epilogue_output_larger_than_its_own():
    """An average pool's backward after a classifier's GEMM broadcasts [N, C] to [N, C, H, W]:
    the GEMM's group stops at its own output, and the broadcast goes on in a group of its own."""

    def fn(dy, w, x):  # type: ignore[no-untyped-def]
        g = torch.mm(dy, w)  # [N, C]
        pooled = (g[:, :, None, None] / 16.0).expand(-1, -1, 4, 4)
        return (pooled * (x > 0),)

    inputs = (torch.randn(4, 10), torch.randn(10, 8), torch.randn(4, 8, 4, 4))
    sgs = _subgraphs(fn, *inputs)
    gemm = next(sg for sg in sgs if sg.kind == "gemm")
    assert [torch.Size(m[0]).numel() for m in gemm.output_meta] == [4 * 8]  # [N, C], viewed
    for seed, sg in enumerate(sgs):
        check(sg, lower(sg), seed=seed)


def test_every_subgraph_of_the_hand_written_gpt_and_the_conv_net_lowers_but_convolutions():
    for name in ("mini_gpt", "convnet"):
        w = WORKLOADS[name](torch.device("cpu"), torch.float32, "tiny")
        torch._dynamo.reset()
        for sg in find_subgraphs(w.model, *w.inputs, rewrites={}):
            if sg.kind != "conv":
                lower(sg)  # raises Unsupported naming the output that does not fit


class _QkvRope(torch.nn.Module):
    """A Llama-style attention input: one QKV GEMM, q and k rotated (RoPE: x * cos plus the
    rotated halves times sin), then attention."""

    def __init__(self, d: int = 64, heads: int = 4, seq: int = 32) -> None:
        super().__init__()
        self.heads, self.qkv = heads, torch.nn.Linear(d, 3 * d, bias=False)
        self.register_buffer("cos", torch.randn(seq, d // heads))
        self.register_buffer("sin", torch.randn(seq, d // heads))

    def rope(self, x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, -1)
        return x * self.cos + torch.cat([-x2, x1], -1) * self.sin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(self.rope(q), self.rope(k), v, is_causal=True)


def test_a_qkv_gemm_with_rope_is_searchable_and_its_rope_goes_on_beside_it():
    """RoPE reads q and k, parts of the GEMM's output, at index maps of their own (a select of
    q, the rotated half of it): in the GEMM's group the lowering refused the group, QKV GEMM
    included. The GEMM's group now stops where a part is computed on, so it lowers alone."""
    sgs = find_subgraphs(_QkvRope(), torch.randn(2, 32, 64), train=False, rewrites={})
    gemm = next(sg for sg in sgs if sg.kind == "gemm")
    assert gemm.ops == ["mm"]
    for seed, sg in enumerate(sgs):
        if sg.kind != "attention":
            check(sg, lower(sg), seed=seed)


def test_a_transformer_encoder_layer_lowers_in_inference():
    """nn.TransformerEncoderLayer's out-projection adds its residual after transposing the
    GEMM's [T*B, d] rows back to [B, T, d]: computed at another index map than the GEMM's, it
    made the GEMM's group unlowerable. Every subgraph of the layer lowers and matches now."""
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, dropout=0.0)
    sgs = find_subgraphs(layer, torch.randn(2, 32, 64), train=False, rewrites={})
    assert any(sg.kind == "gemm" and sg.ops == ["addmm"] for sg in sgs)
    for seed, sg in enumerate(sgs):
        if sg.kind != "attention":
            check(sg, lower(sg), seed=seed)


def test_a_group_norm_backward_keeps_its_per_group_sums_apart_from_dx():
    """GroupNorm's backward sums per channel, then per group over the channels ([N, G, C/G]),
    and computes dx over the whole input ([N, G, C/G, H*W]). Moved down to dx's group, the
    sums made its domain what they read, smaller than dx: the lowering refused the group. Each
    now keeps a domain of its own, and every subgraph lowers and matches."""
    norm = torch.nn.GroupNorm(4, 16)
    x = torch.randn(2, 16, 8, 8, requires_grad=True)
    sgs = find_subgraphs(norm, x, train=True, rewrites={})
    assert any(sg.graph == "backward" and sg.kind == "reduction" for sg in sgs)
    for seed, sg in enumerate(sgs):
        check(sg, lower(sg), seed=seed)


def test_a_rope_backward_fuses_its_negated_half_and_every_subgraph_lowers():
    """RoPE's backward negates half of each head's gradient (the rotated half's slice): a
    half-size value in the gradient's group. It went on in a group of its own; now the cat
    (chunk's backward) that puts it back into a full-size gradient maps it (lowering/pieces.py),
    so the half, the cat and the gradient's products are one group per tensor; forward and
    backward lower and match."""
    x = torch.randn(2, 32, 64, requires_grad=True)
    sgs = find_subgraphs(_QkvRope(), x, train=True, rewrites={})
    assert not [sg for sg in sgs if sg.graph == "backward" and sg.ops == ["neg"]]
    halves = [sg for sg in sgs if sg.graph == "backward" and "neg" in sg.ops]
    assert len(halves) == 2 and all("cat" in sg.ops for sg in halves)  # q's and k's
    for seed, sg in enumerate(sgs):
        if sg.kind != "attention":
            check(sg, lower(sg), seed=seed)
