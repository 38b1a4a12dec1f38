import torch
import torch.nn as nn
import torch.nn.functional as F

batch, seq, dim, heads, rot = 2, 32, 64, 4, 8


class Model(nn.Module):
    """GPT-NeoX: fused QKV viewed [b, s, h, 3*hd] and split along the last dim, partial rotary,
    parallel attention and MLP from two LayerNorms."""

    def __init__(self):
        super().__init__()
        self.hd = dim // heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.dense = nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        inv = 1.0 / (10000 ** (torch.arange(0, rot, 2).float() / rot))
        f = torch.outer(torch.arange(seq).float(), inv)
        emb = torch.cat((f, f), dim=-1)
        self.register_buffer("cos", emb.cos()[None, None], persistent=False)
        self.register_buffer("sin", emb.sin()[None, None], persistent=False)

    def rope(self, t):
        r, p = t[..., :rot], t[..., rot:]
        r1, r2 = r[..., : rot // 2], r[..., rot // 2 :]
        r = r * self.cos + torch.cat((-r2, r1), dim=-1) * self.sin
        return torch.cat((r, p), dim=-1)

    def forward(self, x):
        b, s, _ = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, s, heads, 3 * self.hd).permute(0, 2, 1, 3)
        q, k, v = qkv.split(self.hd, dim=-1)
        q, k = self.rope(q), self.rope(k)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = self.dense(a.transpose(1, 2).reshape(b, s, dim))
        m = self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x + a + m


def get_inputs():
    return [torch.randn(batch, seq, dim)]


def get_init_inputs():
    return []
