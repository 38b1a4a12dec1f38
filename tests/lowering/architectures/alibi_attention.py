import math

import torch
import torch.nn as nn

batch, seq, dim, heads = 2, 32, 64, 4


class Model(nn.Module):
    """BLOOM/MPT-style attention: ALiBi bias (slope x key position) and a causal mask, by hand,
    with einsum projections."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        slopes = torch.tensor([2 ** (-8 * (i + 1) / heads) for i in range(heads)])
        self.register_buffer(
            "alibi",
            (slopes[:, None] * torch.arange(seq)[None, :])[None, :, None, :],
            persistent=False,
        )
        self.register_buffer(
            "mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)), persistent=False
        )

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, heads, -1).unbind(2)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(dim // heads) + self.alibi
        scores = scores.masked_fill(~self.mask[:s, :s], float("-inf"))
        p = scores.softmax(dim=-1)
        a = torch.einsum("bhqk,bkhd->bqhd", p, v).reshape(b, s, dim)
        return self.out(a)


def get_inputs():
    return [torch.randn(batch, seq, dim)]


def get_init_inputs():
    return []
