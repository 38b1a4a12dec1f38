import torch
import torch.nn as nn

batch, hw, dim, heads, win = 2, 16, 32, 2, 4


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.table = nn.Parameter(torch.randn((2 * win - 1) ** 2, heads) * 0.02)
        coords = torch.stack(
            torch.meshgrid(torch.arange(win), torch.arange(win), indexing="ij")
        ).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (win - 1)
        self.register_buffer("index", rel[..., 0] * (2 * win - 1) + rel[..., 1], persistent=False)

    def forward(self, x):
        b, h, w, c = x.shape
        shortcut = x
        x = torch.roll(self.norm(x), shifts=(-win // 2, -win // 2), dims=(1, 2))
        x = (
            x.view(b, h // win, win, w // win, win, c)
            .permute(0, 1, 3, 2, 4, 5)
            .reshape(-1, win * win, c)
        )
        n = x.shape[1]
        qkv = self.qkv(x).reshape(-1, n, 3, heads, c // heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q * (c // heads) ** -0.5) @ k.transpose(-2, -1)
        bias = self.table[self.index.view(-1)].view(n, n, -1).permute(2, 0, 1)
        attn = (attn + bias.unsqueeze(0)).softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(-1, n, c)
        x = (
            self.proj(x)
            .view(b, h // win, w // win, win, win, c)
            .permute(0, 1, 3, 2, 4, 5)
            .reshape(b, h, w, c)
        )
        x = torch.roll(x, shifts=(win // 2, win // 2), dims=(1, 2))
        return shortcut + x


def get_inputs():
    return [torch.randn(batch, hw, hw, dim)]


def get_init_inputs():
    return []
