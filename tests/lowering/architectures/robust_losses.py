import torch
import torch.nn as nn
import torch.nn.functional as F

batch, feat = 32, 10


class Model(nn.Module):
    """A regression head trained on a mix of robust losses as detection and count models use
    them: Huber, SmoothL1 with beta, a Poisson NLL on log-rates, and a quantile (pinball)
    loss written by hand."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(feat, 32), nn.SiLU(), nn.Linear(32, 4))

    def forward(self, x, target, counts):
        p = self.net(x)
        huber = F.huber_loss(p[:, 0], target[:, 0], delta=0.5)
        sl1 = F.smooth_l1_loss(p[:, 1], target[:, 1], beta=0.3)
        pois = F.poisson_nll_loss(p[:, 2], counts, log_input=True)
        err = target[:, 3] - p[:, 3]
        pinball = torch.maximum(0.9 * err, (0.9 - 1) * err).mean()
        return huber + sl1 + pois + pinball


def get_inputs():
    return [torch.randn(batch, feat), torch.randn(batch, 4), torch.randint(0, 5, (batch,)).float()]


def get_init_inputs():
    return []
