"""The cross-entropy row kernel under the Triton interpreter against its ATen twin and against
PyTorch: the loss per row, and the logits overwritten in place by their scaled gradient —
rows wider than one block (a tail), ignored targets, float32 and bf16."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernelpro_backend.ops.linear_ce import linear_cross_entropy
from kernelpro_backend.ops.linear_ce_rows import cross_entropy_rows, finish, rows_aten


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cols", [50, 5000])  # one block; more than BLOCK with a tail
def test_the_row_kernel_matches_its_aten_twin(cols, dtype):
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(6, cols, generator=g) * 3).to(dtype)
    target = torch.randint(0, cols, (6,), generator=g)
    target[4] = -100
    scale = 1 / 5.0
    want = logits.clone()
    want_loss = rows_aten(want, target, scale, -100, True)
    got = logits.clone()
    loss = cross_entropy_rows(got, target, scale, -100, True)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 1e-3}
    torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, want, **tol)
    assert loss[4] == 0 and not got[4].any()  # the ignored row: no loss, no gradient
    untouched = logits.clone()
    cross_entropy_rows(untouched, target, scale, -100, False)
    assert torch.equal(untouched, logits)  # without gradients the logits stay


def test_the_op_through_the_row_kernel_matches_pytorch(monkeypatch):
    import kernelpro_backend.ops.linear_ce as op

    monkeypatch.setattr(op, "CHUNK_ELEMENTS", 7 * 300)  # several chunks and a short tail
    g = torch.Generator().manual_seed(1)
    x = torch.randn(30, 24, generator=g)
    w = torch.randn(300, 24, generator=g) * 0.3
    b = torch.randn(300, generator=g) * 0.1
    t = torch.randint(0, 300, (30,), generator=g)
    t[7] = 3
    loss, gx, gw, gb, factor = linear_cross_entropy(x, w, b, t, 3, "mean", True, True, True, True)
    assert factor.item() == pytest.approx(
        30 / 29
    )  # the gradients carry 1 / rows; the backward fixes that
    xr, wr, br = (v.clone().requires_grad_(True) for v in (x, w, b))
    ref = F.cross_entropy(F.linear(xr, wr, br), t, ignore_index=3)
    ref.backward()
    torch.testing.assert_close(loss, ref.detach())
    for got, want in ((gx, xr.grad), (gw, wr.grad), (gb, br.grad)):
        torch.testing.assert_close(got * factor, want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_the_op_differentiated_matches_pytorch_when_every_target_is_ignored_or_summed(reduction):
    """Through autograd (the backward multiplies by the factor): a sum, and a mean over no
    target at all (PyTorch: a nan loss and zero gradients, not nan ones)."""
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(12, 16, generator=g), torch.randn(200, 16, generator=g) * 0.3
    t = torch.randint(0, 200, (12,), generator=g)
    if reduction == "mean":
        t[:] = -100
    xa, wa, xr, wr = (v.clone().requires_grad_(True) for v in (x, w, x, w))
    loss = torch.ops.kernelpro.linear_cross_entropy(
        xa, wa, None, t, -100, reduction, True, True, True, False
    )
    (loss[0] * 3.0).backward()
    ref = F.cross_entropy(F.linear(xr, wr), t, reduction=reduction)
    (ref * 3.0).backward()
    torch.testing.assert_close(loss[0], ref.detach(), equal_nan=True)
    for got, want in ((xa.grad, xr.grad), (wa.grad, wr.grad)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_masked_vocabulary_entries_and_ties_match_pytorch():
    """-inf logits (a masked vocabulary), a row of equal values and a row whose maximum comes
    last: the one-exp running sum starts from the lowest finite float, never from -inf."""
    cols = 5000
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(4, cols, generator=g)
    logits[0, 100:] = float("-inf")  # most of the row masked, the target not
    logits[1] = 0.25  # ties everywhere
    logits[2, -1] = 40.0  # the maximum in the tail block
    logits[3, ::2] = float("-inf")
    target = torch.tensor([7, 4999, 3, 10])
    scale = 0.25
    x = logits.clone().requires_grad_(True)
    ref = F.cross_entropy(x, target, reduction="none")
    (ref.sum() * 0.25).backward()
    got = logits.clone()
    loss = cross_entropy_rows(got, target, scale, -100, True)
    torch.testing.assert_close(loss, ref.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, x.grad, rtol=1e-5, atol=1e-6)


def test_a_frozen_head_costs_no_weight_gradient_and_says_so_if_asked():
    """grad_w=False: no dW GEMM (an empty tensor); differentiating for the weight anyway is an
    error that names it, not a silent zero."""
    g = torch.Generator().manual_seed(4)
    x, w = torch.randn(10, 16, generator=g), torch.randn(100, 16, generator=g)
    t = torch.randint(0, 100, (10,), generator=g)
    _, gx, gw, _, _ = linear_cross_entropy(x, w, None, t, -100, "mean", True, True, False, False)
    assert gx.shape == x.shape and gw.numel() == 0
    xa, wa = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    out = torch.ops.kernelpro.linear_cross_entropy(
        xa, wa, None, t, -100, "mean", True, True, False, False
    )
    with pytest.raises(RuntimeError, match="gradient of weight"):
        out[0].backward()


@pytest.mark.parametrize("mean", [True, False])
@pytest.mark.parametrize("rows", [0, 5, 5000])  # none, one block, several with a tail
def test_the_finishing_kernel_sums_counts_and_rounds_like_aten(monkeypatch, mean, rows):
    g = torch.Generator().manual_seed(5)
    losses = torch.rand(rows, generator=g) * 4
    target = torch.randint(0, 9, (rows,), generator=g)
    if rows:
        target[::3] = 7  # ignored
        losses[::3] = 0.0
    got = finish(losses, target, 7, mean, torch.bfloat16)  # the Triton kernel (interpreter)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    want = finish(losses, target, 7, mean, torch.bfloat16)  # the ATen twin
    assert got[0].dtype == want[0].dtype == torch.bfloat16
    torch.testing.assert_close(got[0], want[0], equal_nan=True)
    torch.testing.assert_close(got[1], want[1], rtol=1e-6, atol=0)
