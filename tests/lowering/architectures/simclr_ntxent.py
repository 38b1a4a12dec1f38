import torch
import torch.nn as nn
import torch.nn.functional as F

batch, feat, emb = 16, 32, 24


class Model(nn.Module):
    """SimCLR's NT-Xent loss as the reference implementations write it: a projection head over
    two views, normalised, the 2N x 2N similarity matrix with its diagonal masked by an
    identity mask, and cross-entropy against the positive pair's index."""

    def __init__(self):
        super().__init__()
        self.head = nn.Sequential(nn.Linear(feat, feat), nn.ReLU(), nn.Linear(feat, emb))

    def forward(self, a, b):
        z = F.normalize(self.head(torch.cat([a, b], 0)), dim=1)
        sim = z @ z.t() / 0.1
        n = a.shape[0]
        mask = torch.eye(2 * n, dtype=torch.bool)
        sim = sim.masked_fill(mask, -1e9)
        labels = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
        return F.cross_entropy(sim, labels)


def get_inputs():
    return [torch.randn(batch, feat), torch.randn(batch, feat)]


def get_init_inputs():
    return []
