"""On CUDA in bf16: an all-True SDPA mask built from positions, then a graph break, then SDPA —
the graph after the break drops the mask the earlier graph proved constant (flash attention
takes it from there), checked on each call, and trains as eager does within bf16's tolerance."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

from kernelpro_backend import make_backend
from kernelpro_backend.rewrite.providers import NullProvider

pytestmark = pytest.mark.gpu

B, H, T, D = 2, 8, 256, 64
EPS = torch.finfo(torch.bfloat16).eps


class MaskAcrossABreak(torch.nn.Module):
    """The bidirectional mask with no padding (Hugging Face's `q_idx >= 0`), a graph break
    between building it and the attention (BART's and Whisper's LayerDrop draw)."""

    def forward(self, q, k, v):
        q_idx = torch.arange(q.shape[-2], device=q.device)[None, None, :, None]
        mask = (q_idx >= 0).expand(q.shape[0], 1, q.shape[-2], k.shape[-2])
        torch._dynamo.graph_break()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _inputs(seed: int) -> list[torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [
        torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
        for _ in range(3)
    ]


def _relative(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().float(), want.detach().float()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


@pytest.mark.parametrize("fallback", ["inductor", "eager"])
def test_a_constant_mask_across_a_break_is_dropped_on_cuda_and_trains_as_eager(fallback, caplog):
    """Two calls (the second with the mask the earlier graph makes again, proved again): the
    output and q, k, v's gradients within 2 bf16 eps in norm of eager's, which runs SDPA with
    the boolean mask (another kernel than the flash one the dropped mask allows)."""
    sessions: list = []
    model = MaskAcrossABreak()
    torch._dynamo.reset()
    compiled = torch.compile(
        model,
        backend=make_backend(provider=NullProvider(), sessions=sessions),
        options={"fallback": fallback},
    )
    with caplog.at_level(logging.WARNING, logger="kernelpro"):
        for seed in range(2):
            ins, ref_ins = _inputs(seed), _inputs(seed)
            out, ref = compiled(*ins), model(*ref_ins)
            grad = torch.randn_like(ref)
            out.backward(grad)
            ref.backward(grad)
            assert _relative(out, ref) <= 2 * EPS, seed
            for name, a, b in zip("qkv", ins, ref_ins, strict=True):
                assert _relative(a.grad, b.grad) <= 2 * EPS, (seed, name)
    assert sum(s.rewrites.get("attention_mask", 0) for s in sessions) == 1
    assert "not, on this call, the unmodified output" not in caplog.text  # relied on both calls
