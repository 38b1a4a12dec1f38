import torch
import torch.nn as nn
import torch.nn.functional as F

batch, tokens, dim, codes = 4, 12, 16, 32


class Model(nn.Module):
    """A Gumbel-softmax codebook (wav2vec 2.0's quantizer without the noise, tau fixed): logits
    per code, a tempered softmax, the soft code mix by matmul, and the codebook's perplexity as
    a diversity loss."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(dim, codes)
        self.codebook = nn.Parameter(torch.randn(codes, dim))

    def forward(self, x):
        logits = self.proj(x)
        probs = F.softmax(logits / 0.5, dim=-1)
        q = probs @ self.codebook
        avg = probs.reshape(-1, codes).mean(0)
        perplexity = torch.exp(-(avg * torch.log(avg + 1e-7)).sum())
        return F.mse_loss(q, x) + (codes - perplexity) / codes


def get_inputs():
    return [torch.randn(batch, tokens, dim)]


def get_init_inputs():
    return []
