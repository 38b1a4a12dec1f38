import torch
import torch.nn as nn
import torch.nn.functional as F

batch, feat, classes = 32, 48, 40


class Model(nn.Module):
    """A classifier head with label-smoothing cross-entropy and a focal term, by hand."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(feat, classes)

    def forward(self, x, y):
        logp = F.log_softmax(self.fc(x), dim=-1)
        nll = -logp.gather(1, y[:, None]).squeeze(1)
        smooth = -logp.mean(dim=-1)
        pt = torch.exp(-nll)
        return ((1 - pt) ** 2 * (0.9 * nll + 0.1 * smooth)).mean()


def get_inputs():
    return [torch.randn(batch, feat), torch.randint(0, classes, (batch,))]


def get_init_inputs():
    return []
