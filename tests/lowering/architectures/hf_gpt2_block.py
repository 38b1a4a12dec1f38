import math

import torch
import torch.nn as nn

batch, seq, dim, heads = 2, 32, 64, 4


class Conv1D(nn.Module):
    def __init__(self, nf, nx):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.weight.size(-1),)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


def gelu_new(x):
    return (
        0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
    )


class Model(nn.Module):
    """Hugging Face's GPT-2 block (eager attention): Conv1D, split heads, a causal-mask buffer
    with torch.where and the dtype's minimum, gelu_new."""

    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.c_attn, self.c_proj = Conv1D(3 * dim, dim), Conv1D(dim, dim)
        self.c_fc, self.mlp_proj = Conv1D(4 * dim, dim), Conv1D(dim, 4 * dim)
        self.register_buffer(
            "bias",
            torch.tril(torch.ones(seq, seq, dtype=torch.bool)).view(1, 1, seq, seq),
            persistent=False,
        )

    def split(self, t):
        return t.view(t.size()[:-1] + (heads, dim // heads)).permute(0, 2, 1, 3)

    def forward(self, x):
        h = self.ln_1(x)
        q, k, v = self.c_attn(h).split(dim, dim=2)
        q, k, v = self.split(q), self.split(k), self.split(v)
        w = torch.matmul(q, k.transpose(-1, -2)) / torch.full([], v.size(-1) ** 0.5, dtype=q.dtype)
        t = q.size(-2)
        mask = self.bias[:, :, :t, :t]
        w = torch.where(mask, w, torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype))
        w = nn.functional.softmax(w, dim=-1)
        a = torch.matmul(w, v).permute(0, 2, 1, 3).contiguous()
        a = a.view(a.size()[:-2] + (dim,))
        x = x + self.c_proj(a)
        return x + self.mlp_proj(gelu_new(self.c_fc(self.ln_2(x))))


def get_inputs():
    return [torch.randn(batch, seq, dim)]


def get_init_inputs():
    return []
