import torch
import torch.nn as nn

batch, caps_in, caps_out, dim_in, dim_out = 4, 12, 5, 8, 6


class Model(nn.Module):
    """A capsule layer's squash and one routing-by-agreement iteration written out: predicted
    vectors by einsum, coupling coefficients by softmax over output capsules, the squash
    nonlinearity |s|^2 / (1 + |s|^2) * s / |s|, agreement update, and a margin loss."""

    def __init__(self):
        super().__init__()
        self.W = nn.Parameter(torch.randn(caps_in, caps_out, dim_out, dim_in) * 0.1)

    @staticmethod
    def squash(s):
        n2 = (s * s).sum(-1, keepdim=True)
        return n2 / (1 + n2) * s / torch.sqrt(n2 + 1e-8)

    def forward(self, u, y):
        u_hat = torch.einsum("ijdk,bik->bijd", self.W, u)
        b = torch.zeros(u.shape[0], caps_in, caps_out)
        c = b.softmax(-1)
        v = self.squash((c.unsqueeze(-1) * u_hat).sum(1))
        b = b + (u_hat * v.unsqueeze(1)).sum(-1)
        c = b.softmax(-1)
        v = self.squash((c.unsqueeze(-1) * u_hat).sum(1))
        lengths = v.norm(dim=-1)
        t = (torch.arange(caps_out)[None, :] == y[:, None]).float()
        loss = t * torch.relu(0.9 - lengths) ** 2 + 0.5 * (1 - t) * torch.relu(lengths - 0.1) ** 2
        return loss.sum(-1).mean()


def get_inputs():
    return [torch.randn(batch, caps_in, dim_in), torch.randint(0, caps_out, (batch,))]


def get_init_inputs():
    return []
