import torch
import torch.nn as nn

batch, seq, dim, heads = 2, 32, 64, 4


class Model(nn.Module):
    """BERT's self-attention with a padding mask made additive ((1 - mask) * finfo.min), then
    dropout(0), the output dense + LayerNorm with the residual."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.dense, self.ln = nn.Linear(dim, dim), nn.LayerNorm(dim, eps=1e-12)

    def heads(self, t):
        return t.view(t.shape[0], t.shape[1], heads, -1).permute(0, 2, 1, 3)

    def forward(self, x, mask):
        ext = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / (dim // heads) ** 0.5 + ext
        p = nn.functional.dropout(scores.softmax(dim=-1), p=0.0)
        ctx = torch.matmul(p, v).permute(0, 2, 1, 3).contiguous().view(x.shape)
        return self.ln(self.dense(ctx) + x)


def get_inputs():
    m = torch.ones(batch, seq, dtype=torch.long)
    m[0, 20:] = 0
    return [torch.randn(batch, seq, dim), m]


def get_init_inputs():
    return []
