import torch
import torch.nn as nn
import torch.nn.functional as F

tokens, dim, experts = 32, 16, 4


class Model(nn.Module):
    """A Switch-Transformer top-1 router computed densely (as small research codebases do):
    router softmax, argmax one-hot dispatch mask, every expert applied and combined by the
    mask and the gate, plus the load-balancing loss (fraction routed times mean probability)."""

    def __init__(self):
        super().__init__()
        self.router = nn.Linear(dim, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, dim, 2 * dim) * 0.1)
        self.w2 = nn.Parameter(torch.randn(experts, 2 * dim, dim) * 0.1)

    def forward(self, x):
        probs = F.softmax(self.router(x), dim=-1)
        gate, idx = probs.max(-1)
        mask = F.one_hot(idx, experts).to(x.dtype)
        h = torch.einsum("td,edf->tef", x, self.w1)
        y = torch.einsum("tef,efd->ted", F.gelu(h), self.w2)
        out = (y * (mask * gate[:, None])[..., None]).sum(1)
        balance = experts * (mask.mean(0) * probs.mean(0)).sum()
        return (x + out).pow(2).mean() + 0.01 * balance


def get_inputs():
    return [torch.randn(tokens, dim)]


def get_init_inputs():
    return []
