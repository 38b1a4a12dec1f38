import torch
import torch.nn as nn

queries, tokens, batch, dim, heads = 10, 32, 2, 64, 4


class Model(nn.Module):
    """DETR's decoder layer: sequence-first nn.MultiheadAttention (batch_first=False, the
    default), learned queries with positional embeddings added to q and k, cross-attention to
    the encoder memory, post-norm."""

    def __init__(self):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(dim, heads)
        self.cross = nn.MultiheadAttention(dim, heads)
        self.n1, self.n2, self.n3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))
        self.query_pos = nn.Parameter(torch.randn(queries, 1, dim))

    def forward(self, tgt, memory, pos):
        q = k = tgt + self.query_pos
        tgt = self.n1(tgt + self.self_attn(q, k, tgt)[0])
        tgt = self.n2(tgt + self.cross(tgt + self.query_pos, memory + pos, memory)[0])
        return self.n3(tgt + self.ff(tgt))


def get_inputs():
    return [
        torch.randn(queries, batch, dim),
        torch.randn(tokens, batch, dim),
        torch.randn(tokens, batch, dim),
    ]


def get_init_inputs():
    return []
