"""A strided SDPA mask (T5's permuted position bias) is copied contiguous before SDPA, so
CUDA's fused kernels may take it. On the CPU the stride refuses nothing, so the rewrite is
asked for the CPU here (`devices`) to check it end to end: the graph's SDPA reads a contiguous
copy, and forward and gradients are eager's."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernelpro_backend.fx_passes.sdpa_mask_layout import contiguous_sdpa_masks
from kernelpro_backend.fx_passes.torch_level import ChainNote


class PositionBias(torch.nn.Module):
    """T5's self-attention bias: embedding(buckets) [Sq, Sk, H] permuted to [1, H, Sq, Sk]."""

    def __init__(self, heads: int = 3, buckets: int = 8) -> None:
        super().__init__()
        self.bias = torch.nn.Embedding(buckets, heads)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        s = q.shape[2]
        rel = torch.arange(s)[None, :] - torch.arange(s)[:, None]
        mask = self.bias(rel.clamp(-4, 3) + 4).permute([2, 0, 1]).unsqueeze(0)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0)


def compiled(model: torch.nn.Module, devices: tuple[str, ...], seen: list) -> torch.nn.Module:
    notes: list[ChainNote] = []

    def backend(gm: torch.fx.GraphModule, inputs: list) -> object:
        seen.append(contiguous_sdpa_masks(gm, notes, devices))
        seen.append(gm)
        seen.append(notes)
        return gm.forward

    torch._dynamo.reset()
    return torch.compile(model, backend=backend)  # type: ignore[return-value]


def qkv() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(2, 3, 11, 8, generator=gen).requires_grad_() for _ in range(3)]


def test_a_permuted_bias_is_copied_contiguous_and_trains_as_eager() -> None:
    model, seen = PositionBias(), []
    inputs = qkv()
    out = compiled(model, ("cpu",), seen)(*inputs)
    made, gm, notes = seen
    assert made == 1
    (sdpa,) = [n for n in gm.graph.nodes if n.target is F.scaled_dot_product_attention]
    mask = sdpa.kwargs.get("attn_mask", sdpa.args[3] if len(sdpa.args) > 3 else None)
    assert mask.op == "call_method" and mask.target == "contiguous"
    assert "stride 3" in notes[0].made
    out.sum().backward()
    grads = [x.grad.clone() for x in inputs] + [model.bias.weight.grad.clone()]
    model.zero_grad()
    for x in inputs:
        x.grad = None
    model(*inputs).sum().backward()
    expected = [x.grad for x in inputs] + [model.bias.weight.grad]
    for g, e in zip(grads, expected, strict=True):
        torch.testing.assert_close(g, e)


def test_only_on_the_devices_named_and_only_strided_masks() -> None:
    seen: list = []
    compiled(PositionBias(), ("cuda",), seen)(*qkv())  # CPU tensors: the CPU kernels take it
    assert seen[0] == 0

    class Dense(torch.nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            mask = torch.zeros(q.shape[2], q.shape[2])
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    seen = []
    compiled(Dense(), ("cpu",), seen)(*qkv())
    assert seen[0] == 0
