import torch
import torch.nn as nn

batch, tokens, dim, heads = 2, 12, 32, 4


class Model(nn.Module):
    """A mixture-of-heads gate: a temperature-scaled softmax over the head axis (dim 1 of
    [B, H, T]), per-head value projections summed under the gate, and a cosine-similarity
    loss to a target."""

    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(dim, heads)
        self.values = nn.Linear(dim, heads * dim)
        self.temp = nn.Parameter(torch.tensor(0.7))

    def forward(self, x, target):
        g = (self.gate(x) / self.temp).transpose(1, 2).softmax(dim=1)  # [B, H, T]
        v = self.values(x).view(batch, tokens, heads, dim).permute(0, 2, 1, 3)  # [B, H, T, D]
        y = (g.unsqueeze(-1) * v).sum(1)
        return (1 - nn.functional.cosine_similarity(y, target, dim=-1)).mean()


def get_inputs():
    return [torch.randn(batch, tokens, dim), torch.randn(batch, tokens, dim)]


def get_init_inputs():
    return []
