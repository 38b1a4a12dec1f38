import torch
import torch.nn as nn
import torch.nn.functional as F

batch, tokens, dim, heads, cond = 2, 16, 64, 4, 32


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class Model(nn.Module):
    """DiT block: adaLN-Zero modulation from a conditioning vector (six chunks), attention via
    nn.MultiheadAttention (batch_first), gated residuals."""

    def __init__(self):
        super().__init__()
        self.n1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.n2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(
            nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim)
        )
        self.ada = nn.Linear(cond, 6 * dim)

    def forward(self, x, c):
        s1, sc1, g1, s2, sc2, g2 = self.ada(F.silu(c)).chunk(6, dim=1)
        h = modulate(self.n1(x), s1, sc1)
        x = x + g1.unsqueeze(1) * self.attn(h, h, h, need_weights=False)[0]
        return x + g2.unsqueeze(1) * self.mlp(modulate(self.n2(x), s2, sc2))


def get_inputs():
    return [torch.randn(batch, tokens, dim), torch.randn(batch, cond)]


def get_init_inputs():
    return []
