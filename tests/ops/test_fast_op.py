"""ops/fast_op.py: an operator registered with the dispatcher directly behaves as the custom_op it
replaces — called eagerly, traced with its fake implementation, differentiated through its
registered formula, and compiled."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from kernelpro_backend.ops.fast_op import fast_op

calls = {"body": 0, "fake": 0}


@fast_op("kernelpro::test_scaled_sum")
def scaled_sum(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    calls["body"] += 1
    return (x + y) * scale


@scaled_sum.register_fake
def _fake(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    calls["fake"] += 1
    return torch.empty_like(x)


def _setup(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    ctx.scale = inputs[2]


def _backward(ctx, grad):  # type: ignore[no-untyped-def]
    return grad * ctx.scale, grad * ctx.scale, None


scaled_sum.register_autograd(_backward, setup_context=_setup)


def test_the_op_runs_its_body_and_has_the_inferred_schema() -> None:
    x, y = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(scaled_sum(x, y, 3.0), (x + y) * 3.0)
    schema = str(torch.ops.kernelpro.test_scaled_sum.default._schema)
    assert schema == "kernelpro::test_scaled_sum(Tensor x, Tensor y, float scale) -> Tensor"


def test_fake_tensors_go_to_the_fake_implementation() -> None:
    before = dict(calls)
    with FakeTensorMode() as mode:
        out = scaled_sum(
            mode.from_tensor(torch.randn(2, 3)), mode.from_tensor(torch.randn(2, 3)), 2
        )
    assert out.shape == (2, 3)
    assert calls["fake"] == before["fake"] + 1 and calls["body"] == before["body"]


def test_gradients_come_from_the_registered_formula() -> None:
    x = torch.randn(5, requires_grad=True)
    y = torch.randn(5, requires_grad=True)
    scaled_sum(x, y, 0.5).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((5,), 0.5))
    torch.testing.assert_close(y.grad, torch.full((5,), 0.5))


def test_a_compiled_function_calls_the_op_in_one_graph() -> None:
    torch._dynamo.reset()
    fn = torch.compile(lambda a, b: scaled_sum(a.sin(), b, 2.0).cos(), fullgraph=True)
    a, b = torch.randn(8, requires_grad=True), torch.randn(8)
    out = fn(a, b)
    torch.testing.assert_close(out, ((a.sin() + b) * 2.0).cos())
    out.sum().backward()
    assert a.grad is not None and torch.isfinite(a.grad).all()


def test_only_kernelpro_operators_are_registered_here() -> None:
    with pytest.raises(ValueError, match="kernelpro:: operators only"):
        fast_op("other::op")(lambda x: x)
