"""`kernelpro::cross_entropy` (the loss on logits a model keeps) against F.cross_entropy on
upcast logits, forward and backward: float32 and bf16 logits, ignored targets, "mean" and
"sum", rows wider than one block; its Triton row kernels (under the interpreter here) and its
ATen path agree, and neither touches the logits."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import kernelpro_backend.ops.cross_entropy  # noqa: F401  (registers the ops)
import kernelpro_backend.ops.cross_entropy_rows as rows


def _case(dtype: torch.dtype, cols: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(13, cols, generator=g) * 3).to(dtype)
    target = torch.randint(0, cols, (13,), generator=g)
    target[[2, 9]] = -100
    return logits, target


def _tolerance(dtype: torch.dtype) -> dict[str, float]:
    """The gradient is rounded once to the logits' dtype: half an eps relative, and the loss
    itself is float32 from the same values."""
    eps = torch.finfo(dtype).eps
    return (
        {"rtol": eps, "atol": eps * 1e-3}
        if dtype != torch.float32
        else {"rtol": 1e-5, "atol": 1e-7}
    )


@pytest.mark.parametrize("interpret", [True, False], ids=["triton", "aten"])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cols", [50, 5000])  # one block; more than BLOCK with a tail
def test_loss_and_gradient_match_cross_entropy_on_upcast_logits(
    cols, dtype, reduction, interpret, monkeypatch
):
    if not interpret:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    logits, target = _case(dtype, cols)
    before = logits.clone()
    mine, ref = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    loss, lse, _ = torch.ops.kernelpro.cross_entropy(mine, target, -100, reduction, torch.float32)
    want = F.cross_entropy(ref.float(), target, reduction=reduction)
    torch.testing.assert_close(loss, want.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse, torch.logsumexp(logits.float(), -1), rtol=1e-6, atol=1e-5)
    (loss * 2.5).backward()
    (want * 2.5).backward()
    assert mine.grad.dtype == dtype
    torch.testing.assert_close(mine.grad, ref.grad, **_tolerance(dtype))
    assert not mine.grad[[2, 9]].any()  # ignored rows: no gradient
    assert torch.equal(mine.detach(), before)  # the logits are the model's: left alone


def test_the_loss_keeps_the_graphs_dtype_and_a_mean_over_nothing_is_nan_with_zero_gradients():
    logits, target = _case(torch.bfloat16, 40)
    target[:] = -100
    x = logits.clone().requires_grad_()
    loss = torch.ops.kernelpro.cross_entropy(x, target, -100, "mean", torch.bfloat16)[0]
    assert loss.dtype == torch.bfloat16 and loss.isnan()
    loss.backward()
    assert x.grad is not None and not x.grad.any()


def test_strided_logits_and_many_aten_chunks_match(monkeypatch):
    """Logits sliced from a wider tensor (a row stride above the vocabulary) and the ATen path
    over several chunks of rows."""
    monkeypatch.setattr(rows, "ATEN_CHUNK_ELEMENTS", 3 * 64)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    wide, target = _case(torch.float32, 80)
    logits = wide[:, :64]
    target = target.clamp(max=63)
    mine = logits.detach().clone().requires_grad_()
    loss = torch.ops.kernelpro.cross_entropy(logits, target, -100, "sum", torch.float32)[0]
    ref = F.cross_entropy(mine, target, reduction="sum")
    torch.testing.assert_close(loss, ref.detach(), rtol=1e-5, atol=1e-5)
    x = logits.detach().clone().requires_grad_()
    torch.ops.kernelpro.cross_entropy(x, target, -100, "sum", torch.float32)[0].backward()
    ref.backward()
    torch.testing.assert_close(x.grad, mine.grad, rtol=1e-5, atol=1e-7)
