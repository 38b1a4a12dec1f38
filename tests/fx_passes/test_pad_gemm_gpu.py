"""On CUDA in bf16: an LM head with an odd vocabulary (512 -> 50257) whose logits leave the
graph (dY comes from outside it, as from a loss computed eagerly) is padded by the backend, and
its forward and backward equal eager's within bf16's tolerance."""

from __future__ import annotations

import pytest
import torch

from kernelpro_backend import make_backend
from kernelpro_backend.rewrite.providers import NullProvider

pytestmark = pytest.mark.gpu

M, K, N = 2048, 512, 50257  # GPT-2's vocabulary: N % 8 != 0, above pad_gemm's row/flop gates
EPS = torch.finfo(torch.bfloat16).eps


def _relative(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().float(), want.detach().float()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


@pytest.mark.parametrize("fallback", ["inductor", "eager"])
def test_an_odd_lm_head_is_padded_on_cuda_and_trains_as_eager(fallback):
    """The logits (their strides too: the caller gets them as plain Inductor gives them, whose
    joint-graph pass pad_mm may pad the forward GEMM by timing it and return a slice of padded
    rows: on the H100 it did, (50264, 1); the rewrite itself leaves the forward as written)
    and the gradients of x, W and b within 2 bf16 eps in norm of eager's (the padded GEMMs sum
    the same products plus exact zeros; cuBLAS picks another kernel by shape)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(K, N).cuda().bfloat16()
    ref = torch.nn.Linear(K, N).cuda().bfloat16()
    ref.load_state_dict(model.state_dict())
    sessions: list = []
    torch._dynamo.reset()
    compiled = torch.compile(
        model,
        backend=make_backend(provider=NullProvider(), sessions=sessions),
        options={"fallback": fallback},
    )
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    out, want = compiled(x), ref(x_ref)
    # the same head under plain Inductor, trained as above, in this process (pad_mm's cache)
    plain = torch.compile(torch.nn.Linear(K, N).cuda().bfloat16())(x_ref.detach().requires_grad_())
    assert out.shape == want.shape and out.stride() == plain.stride(), (
        out.stride(),
        plain.stride(),
    )
    dy = torch.randn_like(want)  # from outside the graph: a graph input of the backward
    out.backward(dy)
    want.backward(dy)
    assert sum(s.rewrites.get("pad_gemm", 0) for s in sessions) == 1
    assert _relative(out, want) <= 2 * EPS
    assert _relative(x.grad, x_ref.grad) <= 2 * EPS
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        assert _relative(p.grad, q.grad) <= 2 * EPS, name
    out.view(-1, N)  # the caller's view of the logits (HF's `logits.view(-1, vocab)`) works
