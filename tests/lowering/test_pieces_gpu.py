"""GPU tier: the cat-fused RoPE kernels (lowering/pieces.py) compiled by Triton for the device,
not the interpreter: a Llama-like head layout (head dim 128, 2048 positions) trains like eager
on them, float32 and bf16, with the masked piece loads at real widths."""

from __future__ import annotations

import pytest
import torch
from test_pieces import Rope, _PieceKernels

from kernelpro_backend import make_backend

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_trains_like_eager_on_its_kernels_on_cuda(dtype: torch.dtype) -> None:
    heads, d, s = 4, 512, 2048
    torch.manual_seed(0)
    x = torch.randn(2, s, d, device="cuda", dtype=dtype)
    cos = torch.randn(s, d // heads, device="cuda", dtype=dtype)
    sin = torch.randn(s, d // heads, device="cuda", dtype=dtype)
    model = Rope(d, heads).to("cuda", dtype)
    ref = Rope(d, heads).to("cuda", dtype)
    ref.load_state_dict(model.state_dict())
    provider = _PieceKernels()
    torch._dynamo.reset()
    compiled = torch.compile(
        model, backend=make_backend(provider=provider), options={"fallback": "eager"}
    )
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    got, want = compiled(xa, cos, sin), ref(xb, cos, sin)
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    torch.testing.assert_close(got, want, **tol)
    got.float().square().sum().backward()
    want.float().square().sum().backward()
    assert provider.kernels == 3  # q's and k's forward, the backward
    torch.testing.assert_close(xa.grad, xb.grad, **tol)
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        # the weight's gradient sums 4096 rows: bf16's rounding of each term adds up
        torch.testing.assert_close(p.grad.float(), q.grad.float(), **tol)
