import torch
import torch.nn as nn

batch, tokens, dim = 4, 20, 32


class Model(nn.Module):
    """Attention pooling over a padded sequence (as in many text classifiers): a learned
    query's scores over tokens, padding masked with -inf via masked_fill, softmax, the
    weighted sum by bmm, a classifier and BCE over multi-label targets."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.query = nn.Parameter(torch.randn(dim))
        self.out = nn.Linear(dim, 6)

    def forward(self, x, lengths, y):
        h = torch.tanh(self.proj(x))
        scores = h @ self.query
        pad = torch.arange(tokens)[None, :] >= lengths[:, None]
        w = scores.masked_fill(pad, float("-inf")).softmax(-1)
        pooled = torch.bmm(w.unsqueeze(1), x).squeeze(1)
        return nn.functional.binary_cross_entropy_with_logits(self.out(pooled), y)


def get_inputs():
    return [
        torch.randn(batch, tokens, dim),
        torch.tensor([20, 13, 7, 1]),
        torch.rand(batch, 6).round(),
    ]


def get_init_inputs():
    return []
