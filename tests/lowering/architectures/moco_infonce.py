import torch
import torch.nn as nn
import torch.nn.functional as F

batch, feat, emb, queue = 8, 32, 16, 64


class Model(nn.Module):
    """MoCo's InfoNCE as its reference writes it: query and key encoders' normalised outputs,
    the positive logit by einsum, negatives against a queue, concatenated, divided by the
    temperature, and cross-entropy against index 0."""

    def __init__(self):
        super().__init__()
        self.q = nn.Linear(feat, emb)
        self.k = nn.Linear(feat, emb)

    def forward(self, xq, xk, queue_feats):
        q = F.normalize(self.q(xq), dim=1)
        k = F.normalize(self.k(xk), dim=1).detach()
        l_pos = torch.einsum("nc,nc->n", q, k).unsqueeze(-1)
        l_neg = torch.einsum("nc,ck->nk", q, queue_feats)
        logits = torch.cat([l_pos, l_neg], dim=1) / 0.07
        labels = torch.zeros(logits.shape[0], dtype=torch.long)
        return F.cross_entropy(logits, labels)


def get_inputs():
    return [
        torch.randn(batch, feat),
        torch.randn(batch, feat),
        F.normalize(torch.randn(emb, queue), dim=0),
    ]


def get_init_inputs():
    return []
