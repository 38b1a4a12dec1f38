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
