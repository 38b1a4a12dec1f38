import torch
import torch.nn as nn
import torch.nn.functional as F

batch, feat, classes = 16, 24, 7


class Model(nn.Module):
    """Mixup training as timm and the reference code write it: inputs mixed with a flipped
    batch by a given lambda, a classifier, and the lambda-weighted sum of the two
    label-smoothed cross-entropies."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(feat, 48), nn.ReLU(), nn.LayerNorm(48), nn.Linear(48, classes)
        )

    def forward(self, x, y, lam):
        mixed = lam * x + (1 - lam) * x.flip(0)
        out = self.net(mixed)
        ce_a = F.cross_entropy(out, y, label_smoothing=0.1)
        ce_b = F.cross_entropy(out, y.flip(0), label_smoothing=0.1)
        return lam * ce_a + (1 - lam) * ce_b


def get_inputs():
    return [torch.randn(batch, feat), torch.randint(0, classes, (batch,)), torch.tensor(0.7)]


def get_init_inputs():
    return []
