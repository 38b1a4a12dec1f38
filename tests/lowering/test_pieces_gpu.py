"""GPU tier: the cat-fused RoPE kernels (lowering/pieces.py) compiled by Triton for the device,
not the interpreter: a Llama-like head layout (head dim 128, 2048 positions) trains like eager
on them in float32, and in bf16 no further from float32's result than eager bf16 is."""

from __future__ import annotations

import pytest
import torch
from test_pieces import Rope, _PieceKernels, rope_trains_like_eager

from kernelpro_backend import make_backend

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
HEADS, D, S = 4, 512, 2048


def _case(dtype: torch.dtype) -> tuple[Rope, Rope, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    inputs = tuple(
        torch.randn(*shape, device="cuda", dtype=dtype)
        for shape in ((2, S, D), (S, D // HEADS), (S, D // HEADS))
    )
    model, ref = Rope(D, HEADS).to("cuda", dtype), Rope(D, HEADS).to("cuda", dtype)
    ref.load_state_dict(model.state_dict())
    return model, ref, inputs


def test_rope_trains_like_eager_on_its_kernels_on_cuda() -> None:
    model, ref, inputs = _case(torch.float32)
    rope_trains_like_eager(model, ref, inputs, {"rtol": 1e-4, "atol": 1e-4})


def _step(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
    x = inputs[0].clone().requires_grad_()
    out = model(x, *inputs[1:])
    out.float().square().sum().backward()
    return [out.float(), x.grad.float()] + [p.grad.float() for p in model.parameters()]


def test_bf16_rope_kernels_are_as_close_to_float32_as_eager_bf16_on_cuda() -> None:
    model, eager, inputs = _case(torch.bfloat16)
    exact = Rope(D, HEADS).cuda()
    exact.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    provider = _PieceKernels()
    torch._dynamo.reset()
    compiled = torch.compile(
        model, backend=make_backend(provider=provider), options={"fallback": "eager"}
    )
    got, bf16, want = _step(compiled, inputs), _step(eager, inputs), _step(exact, tuple(
        t.float() for t in inputs))  # fmt: skip
    assert provider.kernels == 3  # q's and k's forward, the backward
    for g, e, w in zip(got, bf16, want, strict=True):
        assert (g - w).norm() <= 2 * (e - w).norm() + 1e-6 * w.norm()
