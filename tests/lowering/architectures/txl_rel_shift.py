import torch
import torch.nn as nn

batch, heads, q_len, d_head = 2, 2, 8, 8


class Model(nn.Module):
    """Transformer-XL's relative attention scores as its authors write them: content scores
    plus position scores with the pad-and-reshape relative shift, a causal mask by triu, and
    a softmax-weighted sum."""

    def __init__(self):
        super().__init__()
        self.q = nn.Linear(heads * d_head, heads * d_head)
        self.k = nn.Linear(heads * d_head, heads * d_head)
        self.v = nn.Linear(heads * d_head, heads * d_head)
        self.r = nn.Linear(heads * d_head, heads * d_head)
        self.u = nn.Parameter(torch.randn(heads, d_head) * 0.1)
        self.w = nn.Parameter(torch.randn(heads, d_head) * 0.1)

    @staticmethod
    def rel_shift(x):
        b, h, q, k = x.shape
        x = torch.nn.functional.pad(x, (1, 0))
        x = x.view(b, h, k + 1, q)
        return x[:, :, 1:].view(b, h, q, k)

    def forward(self, x, pos):
        b = x.shape[0]
        q = self.q(x).view(b, q_len, heads, d_head)
        k = self.k(x).view(b, q_len, heads, d_head)
        v = self.v(x).view(b, q_len, heads, d_head)
        r = self.r(pos).view(q_len, heads, d_head)
        ac = torch.einsum("bihd,bjhd->bhij", q + self.u, k)
        bd = self.rel_shift(torch.einsum("bihd,jhd->bhij", q + self.w, r))
        s = (ac + bd) / d_head**0.5
        mask = torch.triu(torch.ones(q_len, q_len, dtype=torch.bool), 1)
        s = s.masked_fill(mask, float("-inf")).softmax(-1)
        return torch.einsum("bhij,bjhd->bihd", s, v).pow(2).mean()


def get_inputs():
    return [torch.randn(batch, q_len, heads * d_head), torch.randn(q_len, heads * d_head)]


def get_init_inputs():
    return []
