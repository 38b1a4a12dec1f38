import torch
import torch.nn as nn

batch, seq, dim = 2, 16, 32


class Model(nn.Module):
    """RWKV's token shift and channel mix as RWKV-LM writes them: the previous token by
    ZeroPad2d, learned interpolation between a token and its predecessor, squared ReLU keys and
    a sigmoid receptance gate."""

    def __init__(self):
        super().__init__()
        self.shift = nn.ZeroPad2d((0, 0, 1, -1))
        self.mix_k = nn.Parameter(torch.rand(1, 1, dim))
        self.mix_r = nn.Parameter(torch.rand(1, 1, dim))
        self.key = nn.Linear(dim, 4 * dim, bias=False)
        self.value = nn.Linear(4 * dim, dim, bias=False)
        self.receptance = nn.Linear(dim, dim, bias=False)
        self.ln = nn.LayerNorm(dim)

    def forward(self, x):
        h = self.ln(x)
        xx = self.shift(h)
        xk = h * self.mix_k + xx * (1 - self.mix_k)
        xr = h * self.mix_r + xx * (1 - self.mix_r)
        k = torch.square(torch.relu(self.key(xk)))
        out = torch.sigmoid(self.receptance(xr)) * self.value(k)
        return (x + out).pow(2).mean()


def get_inputs():
    return [torch.randn(batch, seq, dim)]


def get_init_inputs():
    return []
