import torch
import torch.nn as nn
import torch.nn.functional as F

batch, seq, dim = 4, 32, 32


class Model(nn.Module):
    """Conformer's convolution module: LayerNorm, pointwise conv as Linear, GLU, depthwise
    conv1d, BatchNorm1d, Swish, Linear, residual."""

    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        self.pw1 = nn.Linear(dim, 2 * dim)
        self.dw = nn.Conv1d(dim, dim, 7, padding=3, groups=dim)
        self.bn = nn.BatchNorm1d(dim)
        self.pw2 = nn.Linear(dim, dim)

    def forward(self, x):
        h = F.glu(self.pw1(self.ln(x)), dim=-1).transpose(1, 2)
        h = F.silu(self.bn(self.dw(h))).transpose(1, 2)
        return x + self.pw2(h)


def get_inputs():
    return [torch.randn(batch, seq, dim)]


def get_init_inputs():
    return []
