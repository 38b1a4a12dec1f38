"""Helpers of the lowering tests: a provider that runs every GEMM subgraph on its lowered
default kernel, and one training step of a model through it checked against eager."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

from kernelpro_backend import make_backend
from kernelpro_backend.lowering import lower


class LoweredKernels:
    """Every subgraph `select` picks on its lowered default kernel. Records the patterns served
    ("<graph> <pattern>"), how many kernels have several outputs, and the picked subgraphs
    that did not lower."""

    def __init__(self, select: Callable[[Any], bool]) -> None:
        self.select = select
        self.patterns: list[str] = []
        self.multi_output, self.refused = 0, []

    @property
    def kernels(self) -> int:
        return len(self.patterns)

    def find(self, sg):
        from kernelpro_backend.codegen.errors import Unsupported
        from kernelpro_backend.runtime.spec_kernel import build_kernel

        if not self.select(sg):
            return None
        try:
            kernel = build_kernel(lower(sg))
        except Unsupported as e:
            self.refused.append(f"{sg.graph} {sg.pattern}: {e}")
            return None
        self.patterns.append(f"{sg.graph} {sg.pattern}")
        self.multi_output += len(sg.outputs) > 1
        return kernel


class GemmKernels(LoweredKernels):
    """Every GEMM subgraph on its lowered default kernel."""

    def __init__(self) -> None:
        super().__init__(lambda sg: sg.kind == "gemm")


def train_like_eager(
    make: Callable[[], nn.Module], x: torch.Tensor, provider: LoweredKernels, fallback: str
) -> None:
    """One forward and backward of `make()` compiled through `provider`, outputs and parameter
    gradients equal to an eager copy's."""
    torch.manual_seed(0)
    model, ref = make(), make()
    ref.load_state_dict(model.state_dict())
    torch._dynamo.reset()
    compiled = torch.compile(
        model, backend=make_backend(provider=provider), options={"fallback": fallback}
    )
    got, want = compiled(x), ref(x)
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    sum(g.square().sum() for g in got).backward()
    sum(w.square().sum() for w in want).backward()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4)
