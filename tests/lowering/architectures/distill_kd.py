import torch
import torch.nn as nn
import torch.nn.functional as F

batch, feat, classes = 16, 32, 20


class Model(nn.Module):
    """Knowledge distillation as Hinton et al.'s recipe is usually written: a student head,
    the KL divergence between temperature-softened log-probabilities (batchmean, scaled by
    T^2) against a teacher's logits, plus hard-label cross-entropy."""

    def __init__(self):
        super().__init__()
        self.student = nn.Sequential(nn.Linear(feat, 64), nn.GELU(), nn.Linear(64, classes))

    def forward(self, x, teacher_logits, y):
        s = self.student(x)
        t = 4.0
        kd = (
            F.kl_div(
                F.log_softmax(s / t, -1),
                F.log_softmax(teacher_logits / t, -1),
                reduction="batchmean",
                log_target=True,
            )
            * t
            * t
        )
        return 0.9 * kd + 0.1 * F.cross_entropy(s, y)


def get_inputs():
    return [
        torch.randn(batch, feat),
        torch.randn(batch, classes),
        torch.randint(0, classes, (batch,)),
    ]


def get_init_inputs():
    return []
