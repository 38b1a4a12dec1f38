import torch
import torch.nn as nn
import torch.nn.functional as F

batch, tokens, dim = 8, 16, 32


class Model(nn.Module):
    """An MLP-Mixer block, and BatchNorm1d + dropout(0) + log_softmax head: training-mode batch norm."""

    def __init__(self):
        super().__init__()
        self.n1 = nn.LayerNorm(dim)
        self.tok = nn.Sequential(
            nn.Linear(tokens, 2 * tokens), nn.GELU(), nn.Linear(2 * tokens, tokens)
        )
        self.n2 = nn.LayerNorm(dim)
        self.ch = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.bn = nn.BatchNorm1d(dim)
        self.drop = nn.Dropout(0.0)
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        x = x + self.tok(self.n1(x).transpose(1, 2)).transpose(1, 2)
        x = x + self.ch(self.n2(x))
        x = self.drop(F.relu(self.bn(x.mean(dim=1))))
        return F.log_softmax(self.head(x), dim=-1)


def get_inputs():
    return [torch.randn(batch, tokens, dim)]


def get_init_inputs():
    return []
