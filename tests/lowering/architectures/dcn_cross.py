import torch
import torch.nn as nn

batch, fields, vocab, emb, layers = 32, 6, 50, 8, 3


class Model(nn.Module):
    """A Deep & Cross Network: per-field embeddings concatenated, three cross layers
    x_{l+1} = x0 * (x_l @ w + b) + x_l, a deep tower, and a sigmoid BCE loss."""

    def __init__(self):
        super().__init__()
        self.emb = nn.ModuleList([nn.Embedding(vocab, emb) for _ in range(fields)])
        d = fields * emb
        self.cross = nn.ModuleList([nn.Linear(d, d) for _ in range(layers)])
        self.deep = nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU())
        self.head = nn.Linear(d + 32, 1)

    def forward(self, ids, y):
        x0 = torch.cat([e(ids[:, i]) for i, e in enumerate(self.emb)], dim=1)
        x = x0
        for layer in self.cross:
            x = x0 * layer(x) + x
        logit = self.head(torch.cat([x, self.deep(x0)], dim=1)).squeeze(1)
        return nn.functional.binary_cross_entropy_with_logits(logit, y)


def get_inputs():
    return [torch.randint(0, vocab, (batch, fields)), torch.rand(batch)]


def get_init_inputs():
    return []
