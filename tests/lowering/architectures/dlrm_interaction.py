import torch
import torch.nn as nn

batch, dense, tables, rows, dim = 16, 13, 4, 30, 16


class Model(nn.Module):
    """DLRM's dot interaction: a bottom MLP over dense features, embedding bags per sparse
    feature, pairwise dot products by bmm, the strictly lower triangle gathered by index, and
    a top MLP with a BCE loss."""

    def __init__(self):
        super().__init__()
        self.bot = nn.Sequential(nn.Linear(dense, 32), nn.ReLU(), nn.Linear(32, dim), nn.ReLU())
        self.emb = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(tables))
        n = tables + 1
        li, lj = torch.tril_indices(n, n, offset=-1)
        self.register_buffer("li", li)
        self.register_buffer("lj", lj)
        self.top = nn.Sequential(nn.Linear(dim + n * (n - 1) // 2, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, x, idx, offsets, y):
        d = self.bot(x)
        feats = [d] + [e(idx[k], offsets) for k, e in enumerate(self.emb)]
        t = torch.stack(feats, 1)
        z = torch.bmm(t, t.transpose(1, 2))
        inter = z[:, self.li, self.lj]
        out = self.top(torch.cat([d, inter], 1)).squeeze(1)
        return nn.functional.binary_cross_entropy_with_logits(out, y)


def get_inputs():
    idx = torch.randint(0, rows, (tables, batch * 2))
    offsets = torch.arange(0, batch * 2, 2)
    return [torch.randn(batch, dense), idx, offsets, torch.rand(batch)]


def get_init_inputs():
    return []
