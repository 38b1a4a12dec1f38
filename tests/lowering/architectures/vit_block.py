import torch
import torch.nn as nn

batch, img, patch, dim, heads = 2, 32, 8, 64, 4


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Conv2d(3, dim, patch, stride=patch)
        n = (img // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim)
        )
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        x = self.proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        x = x + self.mlp(self.norm2(x))
        return self.head(x[:, 0])


def get_inputs():
    return [torch.randn(batch, 3, img, img)]


def get_init_inputs():
    return []
