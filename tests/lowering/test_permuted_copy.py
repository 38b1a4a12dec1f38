"""nn.TransformerEncoderLayer / DecoderLayer with batch_first=True hand nn.MultiheadAttention a
transposed copy of their [B, T, d] activations: a norm's output, or a backward GEMM's residual
sum, leaves its group both as it is and through permute + clone. Laid over the domain itself,
the copy read the group's values at a second index map, which no template computes, and the
lowering refused the group whole (the forward LayerNorm of a pre-norm layer; the backward's
GEMM with its row reductions). The copy now takes the map its value gets from the other
outputs and is stored permuted. Every subgraph of the layers lowers and matches under the
Triton interpreter."""

from __future__ import annotations

import pytest
import torch
from harness import check

from kernelpro_backend.explain import find_subgraphs
from kernelpro_backend.lowering import lower


def _norm_then_transposed_copy(x, w, b):  # type: ignore[no-untyped-def]
    y = torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)
    return y.transpose(0, 1).contiguous()


class _NormCopy(torch.nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.w, self.b = torch.nn.Parameter(torch.randn(d)), torch.nn.Parameter(torch.randn(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _norm_then_transposed_copy(x, self.w, self.b)


def test_a_norm_stores_its_transposed_copy_directly():
    sgs = find_subgraphs(_NormCopy(48), torch.randn(2, 24, 48), train=True, rewrites={})
    norm = next(sg for sg in sgs if sg.graph == "forward" and sg.kind == "reduction")
    assert (24, 2, 48) in [tuple(m[0]) for m in norm.output_meta]
    for seed, sg in enumerate(sgs):
        check(sg, lower(sg), seed=seed)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_every_subgraph_of_a_batch_first_encoder_layer_lowers_and_matches(norm_first: bool):
    layer = torch.nn.TransformerEncoderLayer(
        64, 4, 128, batch_first=True, dropout=0.0, norm_first=norm_first, activation="gelu"
    )
    x = torch.randn(2, 32, 64, requires_grad=True)
    for seed, sg in enumerate(find_subgraphs(layer, x, train=True, rewrites={})):
        if sg.kind != "attention":
            check(sg, lower(sg), seed=seed)


def test_every_subgraph_of_a_batch_first_decoder_layer_lowers_and_matches():
    layer = torch.nn.TransformerDecoderLayer(64, 4, 128, batch_first=True, dropout=0.0)
    tgt, memory = torch.randn(2, 16, 64, requires_grad=True), torch.randn(2, 24, 64)
    for seed, sg in enumerate(find_subgraphs(layer, tgt, memory, train=True, rewrites={})):
        if sg.kind != "attention":
            check(sg, lower(sg), seed=seed)


class _MixerBlock(torch.nn.Module):
    """An MLP-Mixer block: token mixing (LayerNorm, an MLP across tokens between two
    transposes, added back), then channel mixing (LayerNorm, an MLP, added back). The
    backward's GEMM group of the channel MLP's first layer ends in the norm's dx plus the
    residual's gradient, which leaves the group transposed (for the token mixing's
    backward). The copy's chain starts at that sum, whose first operand is a subgraph input
    (the pooling's gradient): the chain must stop there, not walk on into the graph beyond
    it (it did, and the copy was laid over the domain and read the row sums per column)."""

    def __init__(self, tokens: int = 16, d: int = 32) -> None:
        super().__init__()
        self.n1, self.n2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.t1, self.t2 = torch.nn.Linear(tokens, 2 * tokens), torch.nn.Linear(2 * tokens, tokens)
        self.c1, self.c2 = torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gelu = torch.nn.functional.gelu
        x = x + self.t2(gelu(self.t1(self.n1(x).transpose(1, 2)))).transpose(1, 2)
        return (x + self.c2(gelu(self.c1(self.n2(x))))).mean(dim=1)  # a classifier's pooling


@pytest.mark.parametrize("input_grad", [True, False])
def test_every_subgraph_of_a_mixer_block_lowers_and_matches(input_grad: bool):
    """With the input's gradient the residual sum is an output of its own and the copy takes
    its map; without it the sum leaves only through the copy, and is laid over the domain
    before the permute."""
    x = torch.randn(4, 16, 32, requires_grad=input_grad)
    sgs = find_subgraphs(_MixerBlock(), x, train=True, rewrites={})
    assert any(sg.graph == "backward" and sg.kind == "gemm" for sg in sgs)
    for seed, sg in enumerate(sgs):
        check(sg, lower(sg), seed=seed)


class _ContrastiveLoss(torch.nn.Module):
    """CLIP's loss: cross-entropy over a similarity matrix's rows and over its transpose's. The
    transposed logits are copied; a reduction over that copy reads the GEMM's values at the
    transposed map, so it may not join the GEMM's group (the copy alone may: a store)."""

    def __init__(self) -> None:
        super().__init__()
        self.img, self.txt = torch.nn.Linear(24, 16), torch.nn.Linear(20, 16)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        logits = self.img(x) @ self.txt(t).t()
        labels = torch.arange(x.shape[0])
        ce = torch.nn.functional.cross_entropy
        return (ce(logits, labels) + ce(logits.t(), labels)) / 2


def test_every_forward_subgraph_of_a_contrastive_loss_lowers_and_matches():
    x, t = torch.randn(12, 24), torch.randn(12, 20)
    sgs = [
        sg for sg in find_subgraphs(_ContrastiveLoss(), x, t, train=True) if sg.graph == "forward"
    ]
    assert any(sg.kind == "gemm" for sg in sgs)
    for seed, sg in enumerate(sgs):
        try:
            spec = lower(sg)
        except Exception as e:  # the labels' arange alone: folded by the fallback
            assert "reads no tensor" in str(e), f"{sg.pattern}: {e}"
            continue
        check(sg, spec, seed=seed)


def test_two_outputs_from_one_permuted_input_view_share_its_layout() -> None:
    # a soft-Dice loss's backward: two gradients computed elementwise from one NHWC -> NCHW
    # view of the head's output leave the group channels-last. The first output laid the
    # view before its permute over the domain; the second was laid over the domain itself,
    # so the values they share were read at two index maps and the group went to the
    # fallback. The second now follows the first's layout.
    from harness import traced_subgraph

    def fn(x, g):  # type: ignore[no-untyped-def]
        v = x.view(2, 12, 12, 3).permute(0, 3, 1, 2)
        return (-v * g + 1.0, torch.sigmoid(v) * g)

    sg = traced_subgraph(fn, [torch.randn(288, 3), torch.randn(2, 3, 12, 12)], "pointwise")
    assert all(o.meta["val"].stride() == (432, 1, 36, 3) for o in sg.outputs)
    check(sg, lower(sg))
