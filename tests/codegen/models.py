"""Small hand-written modules at odd sizes (no dim a multiple of any tile) for the template
tests: each is compiled through the backend, and every subgraph of its forward and backward
graphs is lowered, built and compared with the reference."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from kernelpro_backend.examples import RMSNorm


class CrossEntropy(nn.Module):
    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, target)


class EpilogueZoo(nn.Module):
    """A linear layer followed by every activation the GEMM epilogue must fuse."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(33, 45)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        return (
            F.gelu(y) + F.gelu(y, approximate="tanh") + F.silu(y) * F.mish(y)
            + F.leaky_relu(y, 0.1) + F.hardtanh(y) + F.hardswish(y) + torch.sigmoid(y)
            + y.clamp(-0.5, 0.7) + torch.tanh(y) + torch.relu(y) * 0.25 + torch.maximum(y, y * 0.5)
        )  # fmt: skip


class GemmRowReductions(nn.Module):
    """Row reductions on a GEMM output (the row fits one tile)."""

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = x @ w
        return y.softmax(-1) + y.logsumexp(-1, keepdim=True) + y.amax(-1, keepdim=True)


class BatchedResidual(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.bmm(a, b) * 0.5 + r)


class Reductions(nn.Module):
    """sum / mean / max / min over the last dim and over the first (column) dim."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.sum(-1, keepdim=True) + x.mean(-1, keepdim=True) * x.amax(-1, keepdim=True)
        cols = x.sum(0) - x.amin(0)
        return torch.tanh(x * rows + cols).sum(-1)  # tanh: bf16 rounding of rows is not amplified


class Broadcasts(nn.Module):
    """A pointwise chain with broadcasting and several outputs."""

    def forward(
        self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        a = x * y + z
        return torch.where(a > 0, a, a.exp() - 1), (a * z).sigmoid()


def cases(dtype: torch.dtype) -> dict[str, tuple[nn.Module, tuple[torch.Tensor, ...]]]:
    def t(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, dtype=dtype, requires_grad=True)

    return {
        "softmax": (nn.Softmax(-1), (t(5, 37),)),
        "log_softmax": (nn.LogSoftmax(-1), (t(5, 37),)),
        "layer_norm": (nn.LayerNorm(37).to(dtype), (t(2, 5, 37),)),
        "rms_norm": (RMSNorm(37).to(dtype), (t(2, 5, 37),)),
        "cross_entropy": (CrossEntropy(), (t(7, 37), torch.randint(0, 37, (7,)))),
        "linear_epilogues": (EpilogueZoo().to(dtype), (t(19, 33),)),
        "gemm_row_reductions": (GemmRowReductions(), (t(13, 21), t(21, 29))),
        "bmm_residual": (BatchedResidual(), (t(3, 17, 23), t(3, 23, 29), t(3, 17, 29))),
        "reductions": (Reductions(), (t(11, 37),)),
        "broadcasts": (Broadcasts(), (t(5, 1, 37), t(3, 37), t(37))),
    }


class PointwiseZoo(nn.Module):
    """The rest of the op table: comparisons, logical ops, rounding, powers, trigonometry.
    (Rounding ops are discontinuous: compared in float32 only, where both sides round the
    same float32 value.)"""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = torch.where(x > y, x.abs().sqrt(), (1 - y) ** 3)
        b = torch.floor(x * 3) + torch.trunc(y * 2) + torch.sign(x) + torch.ceil(y)
        c = (x.abs() + 0.5) ** 1.7 + torch.rsqrt(y.abs() + 1) + torch.log1p(x.abs())
        d = torch.logical_and(x > 0, y < 0).float() + (x >= y).float() * 2 + F.hardsigmoid(x)
        e = torch.sin(x) * torch.cos(y) + torch.expm1(y * 0.1) + torch.reciprocal(x.abs() + 1)
        return (
            a + b + c + d + e,
            torch.clamp(x, min=-0.3),
            torch.minimum(x, y) * torch.maximum(x, y),
        )
