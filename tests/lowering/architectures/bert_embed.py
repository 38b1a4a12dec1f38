import torch
import torch.nn as nn

batch, seq, vocab, dim = 2, 32, 60, 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.word = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq, dim)
        self.token_type = nn.Embedding(2, dim)
        self.ln = nn.LayerNorm(dim, eps=1e-12)
        self.register_buffer("pos_ids", torch.arange(seq).expand(1, -1), persistent=False)

    def forward(self, x, ids, types):
        pos = torch.arange(ids.shape[1], device=ids.device)[None]
        e = self.word(ids) + self.pos(pos) + self.token_type(types)
        return self.ln(e) + x


def get_inputs():
    return [
        torch.randn(batch, seq, dim),
        torch.randint(0, vocab, (batch, seq)),
        torch.randint(0, 2, (batch, seq)),
    ]


def get_init_inputs():
    return []
