"""Test helpers: training a model for a few steps, collecting subgraphs of a model, a small
conv/BatchNorm network, running the `kernelpro cache` command in-process, the per-test
Triton mode of the codegen and lowering tests, and the marks of CUTLASS tests on a GPU."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest
import torch

from kernelpro_backend import make_backend
from kernelpro_backend.cli.cache import run_cli
from kernelpro_backend.cli.main import build_parser
from kernelpro_backend.fx_passes import Subgraph
from kernelpro_backend.runtime.cuda.compile import cutlass_include_dirs, find_nvcc

# A CUTLASS library run on the GPU: the gpu tier, on Hopper, where nvcc and the headers are.
HOPPER_CUTLASS = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
        reason="needs a Hopper GPU",
    ),
    pytest.mark.skipif(
        find_nvcc() is None or not cutlass_include_dirs(), reason="needs nvcc and CUTLASS"
    ),
]


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


def conv_bn_net(channels: int = 16) -> torch.nn.Module:
    """Two conv -> BatchNorm -> ReLU blocks, pooled into a linear layer (seeded): the smallest
    network whose training step Inductor lays channels-last when its layout rule is forced."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, channels, 3, padding=1),
        torch.nn.BatchNorm2d(channels),
        torch.nn.ReLU(),
        torch.nn.Conv2d(channels, channels, 3, padding=1),
        torch.nn.BatchNorm2d(channels),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(channels, 10),
    )


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


def run_cache_cli(*argv: str, validator=None) -> tuple[int, str]:
    """Run `kernelpro cache <argv>` in this process: its exit status and what it printed.
    `validator` replaces the evaluator `verify` runs."""
    args = build_parser().parse_args(["cache", *argv])
    assert args.func is run_cli
    out = io.StringIO()
    return run_cli(args, validator=validator, out=out), out.getvalue()


def triton_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton's CPU interpreter for a test, the real compiler for a GPU-marked one; set per test
    and restored afterwards (tests/codegen/conftest.py says why not at import time). The
    conftests of tests/codegen and tests/lowering make it an autouse fixture."""
    if "gpu" in request.keywords:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    else:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
