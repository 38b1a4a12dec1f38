"""The cross-entropy row kernel under the Triton interpreter against its ATen twin and against
PyTorch: the loss per row, and the logits overwritten in place by their scaled gradient —
rows wider than one block (a tail), ignored targets, float32 and bf16."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernelpro_backend.linear_ce_op import linear_cross_entropy
from kernelpro_backend.linear_ce_rows import cross_entropy_rows, rows_aten


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cols", [50, 5000])  # one block; more than BLOCK with a tail
def test_the_row_kernel_matches_its_aten_twin(cols, dtype):
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(6, cols, generator=g) * 3).to(dtype)
    target = torch.randint(0, cols, (6,), generator=g)
    target[4] = -100
    scale = torch.tensor(1 / 5.0)
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
    import kernelpro_backend.linear_ce_op as op

    monkeypatch.setattr(op, "CHUNK_ELEMENTS", 7 * 300)  # several chunks and a short tail
    g = torch.Generator().manual_seed(1)
    x = torch.randn(30, 24, generator=g)
    w = torch.randn(300, 24, generator=g) * 0.3
    b = torch.randn(300, generator=g) * 0.1
    t = torch.randint(0, 300, (30,), generator=g)
    t[7] = 3
    loss, gx, gw, gb = linear_cross_entropy(x, w, b, t, 3, "mean", True, True)
    xr, wr, br = (v.clone().requires_grad_(True) for v in (x, w, b))
    ref = F.cross_entropy(F.linear(xr, wr, br), t, ignore_index=3)
    ref.backward()
    torch.testing.assert_close(loss, ref.detach())
    for got, want in ((gx, xr.grad), (gw, wr.grad), (gb, br.grad)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
