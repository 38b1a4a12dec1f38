"""A small GPT written the way many research models are: `nn.Embedding`, `nn.LayerNorm`,
`nn.Linear`, attention by hand (matmul -> scale -> causal mask -> softmax -> dropout(0) ->
matmul), a tied-free LM head and cross-entropy over a 32k vocabulary. The training workload
([training]) whose wins are fusions across the boundaries Inductor keeps: the LM head with its
loss, the hand-written attention chain, the norms with their residuals.

Owns: `HandwrittenGPT` and `mini_gpt(device, dtype, size)`, its workload (tiny: CPU tests;
full: batch 4, sequence 1024, width 512, 8 heads, 4 layers, vocabulary 32768).
Must not: time, compile or compare anything.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .workload import Workload, check_size, resolve_dtype


class _Block(nn.Module):
    def __init__(self, dim: int, heads: int, seq: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.drop = nn.Dropout(0.0)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.fc_out = nn.Linear(4 * dim, dim)
        self.mask: torch.Tensor
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
        att = self.drop(F.softmax(att, dim=-1))
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln1(x))
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x))))


class HandwrittenGPT(nn.Module):
    """Token ids -> next-token cross-entropy, nanoGPT-style."""

    def __init__(self, vocab: int, dim: int, heads: int, layers: int, seq: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(_Block(dim, heads, seq) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


def mini_gpt(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """Training step of HandwrittenGPT (bf16 on the GPU, AdamW)."""
    check_size(size)
    tiny = dict(b=2, t=16, d=32, h=2, layers=2, vocab=128)
    full = dict(b=4, t=1024, d=512, h=8, layers=4, vocab=32768)
    p = tiny if size == "tiny" else full
    dt = resolve_dtype(device, dtype, torch.bfloat16)
    torch.manual_seed(0)
    model = HandwrittenGPT(p["vocab"], p["d"], p["h"], p["layers"], p["t"])
    model = model.to(device=device, dtype=dt)
    ids = torch.randint(0, p["vocab"], (p["b"], p["t"]), device=device)
    targets = torch.randint(0, p["vocab"], (p["b"], p["t"]), device=device)

    def loss(out: object) -> torch.Tensor:
        assert isinstance(out, torch.Tensor)
        return out

    def adamw(params: object) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=1e-4, foreach=True)  # type: ignore[arg-type]

    return Workload("mini_gpt", model, (ids, targets), dt, size, loss, adamw)
