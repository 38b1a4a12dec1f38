"""A mask that crosses a graph break: the graph that makes it registers it as proved constant,
the graph that reads it drops it from SDPA, and on each call runs that graph only when the mask
it is passed is still a registered one, unwritten since; any other mask (unregistered, written
in place, a view) runs the graph compiled as written, and gets eager's result. Forward and
backward; the mask's other uses kept; two masks in turn (two models sharing the graphs)."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

from kernelpro_backend import make_backend
from kernelpro_backend.rewrite.providers import NullProvider

B, H, T, D = 2, 2, 8, 16
FALLBACK = "this call runs the graph compiled without relying on them"


def _make_mask():
    """The earlier graph: a mask from sizes alone (not expanded: writable in place)."""
    return torch.ones(B, 1, T, T, dtype=torch.bool)


def _attend(q, k, v, mask):
    """The later graph: SDPA reads the mask, and so does something else."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), mask.sum()


def _compiled() -> tuple[list, object, object]:
    torch._dynamo.reset()
    sessions: list = []
    backend = make_backend(provider=NullProvider(), sessions=sessions)
    opts = {"fallback": "eager"}
    make = torch.compile(_make_mask, backend=backend, options=opts)
    return sessions, make, torch.compile(_attend, backend=backend, options=opts)


def _qkv(grad: bool = False) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(B, H, T, D, generator=g, requires_grad=grad) for _ in range(3)]


def _blocked(mask: torch.Tensor) -> torch.Tensor:
    """`mask` with the first query barred from all keys but the first, in place."""
    mask[..., 0, 1:] = False
    return mask


def _check(attend, mask: torch.Tensor) -> None:
    q, k, v = _qkv()
    want = _attend(q, k, v, mask.clone())
    got = attend(q, k, v, mask)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _dropped(sessions) -> int:
    return sum(s.rewrites.get("attention_mask", 0) for s in sessions)


def test_a_registered_mask_is_dropped_and_another_of_its_shape_runs_the_graph_as_written(caplog):
    """The soundness check: without the per-call guard the second call returns the first's
    (unmasked) result."""
    sessions, make, attend = _compiled()
    q, k, v = _qkv()
    mask = make()
    out, _ = attend(q, k, v, mask)
    assert _dropped(sessions) == 1 and len(sessions) == 2
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
    other = _blocked(torch.ones_like(mask))  # same shape, dtype and strides: no recompile
    with caplog.at_level(logging.WARNING, logger="kernelpro"):
        got, total = attend(q, k, v, other)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=other)
    assert not torch.allclose(want, out)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert int(total) == int(other.sum())  # the mask's other use reads the mask passed
    assert len(sessions) == 2 and FALLBACK in caplog.text
    assert "L['mask']" in caplog.text  # the input named


def test_a_registered_mask_written_in_place_is_not_relied_on():
    _, make, attend = _compiled()
    _check(attend, make())  # compiled relying on it
    _check(attend, _blocked(make()))


def test_a_view_of_a_registered_mask_is_not_relied_on_and_the_next_registered_one_is(caplog):
    """Views are new tensors, not registered (Dynamo hands the later graph the very object
    the earlier one returned); the choice is per call: a registered mask after a view runs
    the graph that relies on it again (one fallback call logged per unproven mask)."""
    _, make, attend = _compiled()
    _check(attend, make())
    with caplog.at_level(logging.DEBUG, logger="kernelpro"):
        _check(attend, _blocked(make()[:, :]))
        _check(attend, make()[:, :])
        _check(attend, make())
        _check(attend, make())
    assert caplog.text.count(FALLBACK) == 2


def test_two_registered_masks_in_turn_never_fall_back(caplog):
    """Two models of one class share the compiled graphs: each makes its own mask."""
    sessions, make, attend = _compiled()
    first, second = make(), make()
    with caplog.at_level(logging.DEBUG, logger="kernelpro"):
        for _ in range(2):
            _check(attend, first)
            _check(attend, second)
    assert _dropped(sessions) == 1 and FALLBACK not in caplog.text


@pytest.mark.parametrize("registered", [True, False])
def test_training_through_either_graph_matches_eager(registered):
    sessions, make, attend = _compiled()
    mask = make()
    if not registered:
        attend(*_qkv(grad=True), make())[0].sum().backward()  # compiled relying on one
        mask = _blocked(mask)
    ins, ref_ins = _qkv(grad=True), _qkv(grad=True)
    out, ref = attend(*ins, mask)[0], _attend(*ref_ins, mask.clone())[0]
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    out.square().sum().backward()
    ref.square().sum().backward()
    for a, b in zip(ins, ref_ins, strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)
    assert _dropped(sessions) == 1
