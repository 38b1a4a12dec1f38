"""The project's example models: the workloads its tests, demo, warm-up and shipped cache use.

Owns: three small models (an MLP with LayerNorm and GELU, a pre-norm transformer block with
SDPA attention, RMSNorm and SwiGLU, a conv net with batchnorm and pooling) and functions that
return `(model, example_inputs)` for them, the form `kernelpro explain/warmup MODULE:FN` takes.
Must not: depend on the backend.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, d_in: int = 64, d_hidden: int = 256, d_out: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.norm = nn.LayerNorm(d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_hidden)
        self.head = nn.Linear(d_hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.fc1(x))
        h = self.norm(h)
        h = F.gelu(self.fc2(h))
        return self.head(h)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class TransformerBlock(nn.Module):
    """Pre-norm decoder block: RMSNorm -> causal SDPA attention -> residual ->
    RMSNorm -> SwiGLU MLP -> residual."""

    def __init__(self, dim: int = 64, heads: int = 4, hidden: int = 172) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.norm2 = RMSNorm(dim)
        self.w_gate = nn.Linear(dim, hidden, bias=False)
        self.w_up = nn.Linear(dim, hidden, bias=False)
        self.w_down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        h = self.norm2(x)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class ConvNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.head = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.head(x)


def _device(device: str | None) -> torch.device:
    return torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))


def mlp(device: str | None = None, batch: int = 32) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    dev = _device(device)
    torch.manual_seed(0)
    return MLP().to(dev), (torch.randn(batch, 64, device=dev),)


def transformer_block(
    device: str | None = None, batch: int = 2, seq: int = 16
) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    dev = _device(device)
    torch.manual_seed(0)
    return TransformerBlock().to(dev), (torch.randn(batch, seq, 64, device=dev),)


def convnet(
    device: str | None = None, batch: int = 4
) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    dev = _device(device)
    torch.manual_seed(0)
    return ConvNet().to(dev), (torch.randn(batch, 3, 16, 16, device=dev),)


EXAMPLES = {"mlp": mlp, "transformer_block": transformer_block, "convnet": convnet}
