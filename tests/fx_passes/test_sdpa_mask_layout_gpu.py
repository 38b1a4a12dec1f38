"""On CUDA in bf16 autocast, T5's layout: a learned position bias passed to SDPA permuted
(last-dimension stride H). Compiled through kernelpro (Inductor and eager fallbacks), the mask
is copied contiguous, SDPA runs a fused kernel instead of the float32 math path (the forward
graph holds the efficient attention op), the unset random-number state of the training forward
is zeros Inductor compiles, and the step trains as eager does within bf16's tolerance."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernelpro_backend import make_backend
from kernelpro_backend.rewrite.providers import NullProvider

pytestmark = pytest.mark.gpu

B, H, T, D, BUCKETS = 2, 8, 256, 64, 32


class PermutedBias(torch.nn.Module):
    """T5's self-attention: embedding(buckets) [T, T, H] -> permute -> [1, H, T, T] mask."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = torch.nn.Embedding(BUCKETS, H)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(T, device=q.device)
        rel = (pos[None, :] - pos[:, None]).clamp(-BUCKETS // 2, BUCKETS // 2 - 1) + BUCKETS // 2
        mask = self.bias(rel).permute([2, 0, 1]).unsqueeze(0)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0)


def _relative(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().float(), want.detach().float()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


@pytest.mark.parametrize("fallback", ["inductor", "eager"])
def test_a_permuted_bias_takes_a_fused_kernel_and_trains_as_eager(fallback: str) -> None:
    torch.manual_seed(0)
    model = PermutedBias().cuda()
    q, k, v = (
        torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    ops: list[str] = []

    def observe(kind: str, subgraphs: list) -> None:
        ops.extend(str(n.target) for sg in subgraphs for n in sg.nodes)

    torch._dynamo.reset()
    compiled = torch.compile(
        model,
        backend=make_backend(provider=NullProvider(), observer=observe),
        options={"fallback": fallback},
    )
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = compiled(q, k, v)
    out.float().square().sum().backward()
    got = [out, q.grad, k.grad, v.grad, model.bias.weight.grad]
    assert any("efficient_attention" in o or "flash_attention" in o for o in ops), sorted(set(ops))
    assert not any(o.endswith("bmm.default") for o in ops), "the math path's matmuls remain"

    for x in (q, k, v):
        x.grad = None
    model.zero_grad()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        want_out = model(q, k, v)  # eager: the math path on the strided mask
    want_out.float().square().sum().backward()
    want = [want_out, q.grad, k.grad, v.grad, model.bias.weight.grad]
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert _relative(g, w) < 2e-2, (i, _relative(g, w))
