"""Test helpers: training a model for a few steps, and collecting subgraphs of a model."""

from __future__ import annotations

from collections.abc import Callable

import torch

from kernelpro_backend import make_backend
from kernelpro_backend.fx_passes import Subgraph


def train(
    model: torch.nn.Module,
    x: torch.Tensor,
    wrap: Callable[[torch.nn.Module], Callable] | None = None,
    steps: int = 3,
) -> tuple[list[float], list[torch.Tensor]]:
    """Losses of `steps` SGD steps and the final gradients."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    fn = wrap(model) if wrap else model
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = fn(x).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.grad.detach().clone() for p in model.parameters()]


def subgraphs_of(
    model: torch.nn.Module, *inputs: torch.Tensor, train: bool = True
) -> list[Subgraph]:
    """All subgraphs the backend finds (forward and backward when training)."""
    found: list[Subgraph] = []
    compiled = torch.compile(
        model,
        backend=make_backend(observer=lambda kind, sgs: found.extend(sgs)),
        options={"fallback": "eager", "search": "off"},
    )
    if train:
        compiled(*inputs).float().sum().backward()
    else:
        with torch.no_grad():
            compiled(*inputs)
    return found
