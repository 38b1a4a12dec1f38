import torch
import torch.nn as nn
import torch.nn.functional as F

batch, dim, latent = 16, 24, 6


class Model(nn.Module):
    """A VAE's ELBO as the PyTorch examples write it: encoder to mean and log-variance,
    reparameterisation with a given noise tensor, Bernoulli decoder by BCE with logits summed
    per sample, and the analytic KL term."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(dim, 32)
        self.mu = nn.Linear(32, latent)
        self.logvar = nn.Linear(32, latent)
        self.dec = nn.Sequential(nn.Linear(latent, 32), nn.ReLU(), nn.Linear(32, dim))

    def forward(self, x, eps):
        h = F.relu(self.enc(x))
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + eps * torch.exp(0.5 * logvar)
        rec = F.binary_cross_entropy_with_logits(self.dec(z), x, reduction="sum")
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        return (rec + kld) / x.shape[0]


def get_inputs():
    return [torch.rand(batch, dim), torch.randn(batch, latent)]


def get_init_inputs():
    return []
