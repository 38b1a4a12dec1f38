"""On CUDA: a T5-sized position bias (32 buckets x 12 heads looked up for 1024 x 1024 pairs)
and BERT-sized token types (2 rows x 768 for 32 x 512 tokens), compiled through kernelpro with
Inductor: the accumulate becomes the one-hot GEMM, and the gradient matches the exact sum."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernelpro_backend import make_backend
from kernelpro_backend.fx_passes.small_table_grads import NAME
from kernelpro_backend.rewrite.providers import NullProvider

pytestmark = pytest.mark.gpu


def _buckets(s: int) -> torch.Tensor:
    pos = torch.arange(s, device="cuda")
    return (pos[None, :] - pos[:, None]).clamp(-16, 15) + 16


@pytest.mark.parametrize("tf32", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "case",
    [("position", (32, 12), 1024), ("token_type", (2, 768), 32 * 512)],
)
def test_small_table_gradient_is_the_exact_sum(
    case: tuple, dtype: torch.dtype, tf32: bool, monkeypatch
) -> None:
    """float32 to float32's rounding even where TF32 matmuls are allowed (the split values)."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", tf32)
    name, (rows, width), n = case
    torch.manual_seed(0)
    if name == "position":
        index = _buckets(n)
        grad = torch.randn(width, n, n, device="cuda", dtype=dtype).permute(1, 2, 0)
    else:
        index = torch.randint(0, rows, (32, 512), device="cuda")
        grad = torch.randn(32, 512, width, device="cuda", dtype=dtype)
    weight = torch.randn(rows, width, device="cuda", dtype=dtype, requires_grad=True)

    def step(weight: torch.Tensor, index: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        return (F.embedding(index, weight) * grad).sum()

    sessions: list = []
    torch._dynamo.reset()
    compiled = torch.compile(step, backend=make_backend(provider=NullProvider(), sessions=sessions))
    compiled(weight, index, grad).backward()
    exact = torch.zeros(rows, width, device="cuda", dtype=torch.float64)
    exact.index_add_(0, index.reshape(-1), grad.reshape(-1, width).double())
    assert sum(s.rewrites.get(NAME, 0) for s in sessions) == 1
    err = float((weight.grad.double() - exact).norm() / exact.norm())
    assert err < (2e-6 if dtype == torch.float32 else 8e-3), err  # TF32 unsplit: ~5e-4
