"""The modules the bench's built-in workloads run: model-level (GPT block, MLP, conv net,
mixture of experts, a GPT with hand-written attention) and op-level (norms, softmax, cross-entropy, GEMM epilogue, attention).

Owns: the module definitions, written with plain torch ops so every mode traces the same code.
Must not: pick sizes or dtypes (workloads.py does) or depend on the backend.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class GPTBlock(nn.Module):
    """GPT-2 style pre-norm decoder block: LayerNorm -> causal SDPA attention -> residual ->
    LayerNorm -> MLP (4x, tanh GELU) -> residual."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.fc_out = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class DeepMLP(nn.Module):
    """Linear -> LayerNorm -> GELU blocks and a linear head."""

    def __init__(self, d_in: int, hidden: int, d_out: int, depth: int = 2) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = d_in
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.LayerNorm(hidden), nn.GELU()]
            width = hidden
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class SmallConvNet(nn.Module):
    """Three conv -> batchnorm -> ReLU stages (the first two pooled) and a linear head."""

    def __init__(self, width: int, classes: int) -> None:
        super().__init__()
        chans = (3, width, 2 * width, 4 * width)
        self.convs = nn.ModuleList(
            nn.Conv2d(chans[i], chans[i + 1], 3, padding=1, bias=False) for i in range(3)
        )
        self.norms = nn.ModuleList(nn.BatchNorm2d(c) for c in chans[1:])
        self.head = nn.Linear(chans[-1], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms, strict=True)):
            x = F.relu(norm(conv(x)))
            if i < 2:
                x = F.max_pool2d(x, 2)
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


class TopTwoMoE(nn.Module):
    """Mixture-of-experts FFN: a float32 router picks the top 2 of `experts` GELU FFNs per
    token; tokens are dispatched into fixed-capacity expert buffers (GShard/Switch style), so
    every shape is static and the whole layer is one graph. Tokens past an expert's capacity
    are dropped for that expert (their gate contributes nothing)."""

    def __init__(self, dim: int, hidden: int, experts: int = 8, capacity_factor: float = 1.25):
        super().__init__()
        self.experts = experts
        self.capacity_factor = capacity_factor
        self.router = nn.Linear(dim, experts, bias=False)
        self.w_in = nn.Parameter(torch.randn(experts, dim, hidden) / math.sqrt(dim))
        self.w_out = nn.Parameter(torch.randn(experts, hidden, dim) / math.sqrt(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        tokens, dim = x.shape
        n_exp = self.experts
        capacity = math.ceil(2 * tokens / n_exp * self.capacity_factor)
        # Router in float32: bf16 logits make near-ties pick different experts run to run.
        logits = x.float() @ self.router.weight.float().t()
        gate, expert = torch.softmax(logits, dim=-1).topk(2, dim=-1)
        gate = gate / gate.sum(dim=-1, keepdim=True)
        flat_expert = expert.reshape(-1)  # [2T]: token 0 choice 0, token 0 choice 1, ...
        onehot = F.one_hot(flat_expert, n_exp)
        position = (onehot.cumsum(0) - 1).gather(1, flat_expert[:, None]).squeeze(1)
        kept = position < capacity
        dropped_slot = n_exp * capacity
        slot = torch.where(kept, flat_expert * capacity + position, dropped_slot)
        token = torch.arange(2 * tokens, device=x.device) // 2
        # slot -> token that fills it (empty slots read the zero row at index `tokens`).
        slot_token = torch.full((dropped_slot + 1,), tokens, device=x.device, dtype=token.dtype)
        slot_token = slot_token.scatter(0, slot, token)[:dropped_slot]
        x_padded = torch.cat([x, x.new_zeros(1, dim)])
        h = x_padded[slot_token].view(n_exp, capacity, dim)
        y = torch.bmm(F.gelu(torch.bmm(h, self.w_in)), self.w_out).reshape(-1, dim)
        y_padded = torch.cat([y, y.new_zeros(1, dim)])
        weight = (gate.reshape(-1) * kept).to(x.dtype)
        out = (y_padded[slot] * weight[:, None]).view(tokens, 2, dim).sum(1)
        return out.view(shape)


class LayerNormOp(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


class RMSNormOp(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.randn(dim) * 0.1 + 1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * (
            self.weight
        )


class SoftmaxOp(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


class CrossEntropyOp(nn.Module):
    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets)


class LMHeadLoss(nn.Module):
    """A language model's last layer and its loss: hidden states -> vocabulary logits ->
    cross-entropy against the next tokens (the logits never leave the step)."""

    def __init__(self, d: int, vocab: int) -> None:
        super().__init__()
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.head(hidden), targets)


class GemmBiasGeluOp(nn.Module):
    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.linear = nn.Linear(d_in, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x))


class AttentionOp(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class BiasedAttention(nn.Module):
    """SDPA with a learned [1, H, S, S] additive bias (T5's position bias, Swin's relative
    bias), plus a constant additive `mask` broadcast against it where given (Swin's shifted
    windows, a decoder's causal mask): the bias's gradient flows through the attention."""

    def __init__(self, heads: int, seq: int, mask: torch.Tensor | None = None) -> None:
        super().__init__()
        device = mask.device if mask is not None else None
        self.bias = nn.Parameter(0.5 * torch.randn(1, heads, seq, seq, device=device))
        self.mask = mask

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        bias = self.bias.to(q.dtype)
        if self.mask is not None:
            bias = bias + self.mask
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


def window_mask(batch: int, windows: int, seq: int, device: torch.device | str) -> torch.Tensor:
    """Swin's shifted-window mask, [batch, 1, seq, seq] bf16: in every odd window the two halves
    of the tokens do not see each other (-inf), as a cyclic shift's wrapped tokens."""
    half = torch.arange(seq, device=device) < seq // 2
    per = torch.zeros(windows, 1, seq, seq, device=device, dtype=torch.bfloat16)
    per[1::2] = per[1::2].masked_fill(half[:, None] != half[None, :], float("-inf"))
    return per.repeat(batch // windows, 1, 1, 1)


class _GPTLayer(nn.Module):
    """One pre-norm layer of HandwrittenGPT: attention by hand, then a 4x GELU MLP."""

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
    """A small GPT written the way many research models are: nn.Embedding, nn.LayerNorm,
    nn.Linear, attention by hand (matmul -> scale -> causal mask -> softmax -> dropout(0) ->
    matmul), an LM head and cross-entropy: token ids -> next-token loss, nanoGPT-style."""

    def __init__(self, vocab: int, dim: int, heads: int, layers: int, seq: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(_GPTLayer(dim, heads, seq) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))
