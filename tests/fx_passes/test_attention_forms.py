"""The attention rewrite on the forms libraries write: a softmax in float32 cast back
(`.to(q.dtype)`, `.type(v.dtype)`, `.to(torch.bfloat16)`), an additive mask, GQA's repeated
k/v (expand + reshape), inside an autocast region or in bf16 — each becomes one SDPA call that
computes what eager does within bf16's rounding; casts that would round coarser than SDPA's
output, and the other inexact chains, stay as written with the reason explain shows."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernelpro_backend import make_backend
from kernelpro_backend.fx_passes.attention_rewrite import rewrite_attention
from kernelpro_backend.fx_passes.torch_level import ChainNote
from kernelpro_backend.rewrite.providers import NullProvider

B, H, KV, T, D = 2, 4, 2, 8, 16
BF16 = torch.bfloat16


def repeat_kv(x: torch.Tensor, n: int) -> torch.Tensor:  # as transformers writes it
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, n, s, d).reshape(b, h * n, s, d)


class Forms(torch.nn.Module):
    def __init__(self, form: str) -> None:
        super().__init__()
        self.form = form

    def forward(self, q, k, v, mask):
        f = self.form
        if f == "autocast":  # float32 inputs, the chain inside an autocast region
            with torch.autocast("cpu", dtype=BF16):
                return self.chain(q, k, v, mask)
        return self.chain(q, k, v, mask)

    def chain(self, q, k, v, mask):
        f = self.form
        k, v = repeat_kv(k, H // KV), repeat_kv(v, H // KV)
        w = torch.matmul(q, k.transpose(2, 3)) * 0.25
        if f in ("hf_eager", "autocast", "weights_returned"):  # Hugging Face's eager attention
            w = F.softmax(w + mask, dim=-1, dtype=torch.float32).to(q.dtype)
            w = F.dropout(w, p=0.0, training=True)
            out = torch.matmul(w, v)
            return out + w.sum() if f == "weights_returned" else out
        if f == "type_v_dtype":
            return F.softmax(w + mask, dim=-1, dtype=torch.float32).type(v.dtype) @ v
        if f == "to_bf16":
            return torch.softmax(w.float() + mask, dim=-1).to(torch.bfloat16) @ v
        if f == "coarse_cast":  # float32 weights rounded to bf16 and back: not SDPA's float32
            return (F.softmax(w + mask, dim=-1).to(torch.bfloat16).float()) @ v
        if f == "dropout_p":
            return F.dropout(F.softmax(w + mask, dim=-1, dtype=torch.float32), 0.1, True) @ v
        raise AssertionError(f)


REWRITTEN = ["hf_eager", "autocast", "type_v_dtype", "to_bf16"]
KEPT = {
    "coarse_cast": "the weights are rounded to torch.bfloat16, coarser than the output's",
    "dropout_p": "dropout with p=0.1 in training",
    "weights_returned": "the attention weights (",  # (w_2) have another user: sum_1
}


def _inputs(form: str, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    dtype = torch.float32 if form in ("autocast", "coarse_cast", "dropout_p") else BF16
    shapes = [(B, H, T, D), (B, KV, T, D), (B, KV, T, D)]
    qkv = [(torch.randn(*s, generator=g) * 2).to(dtype).requires_grad_() for s in shapes]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    mask = torch.zeros(B, 1, T, T).masked_fill(~causal, torch.finfo(torch.float32).min)
    mask[1, :, :, :2] = torch.finfo(torch.float32).min  # left padding: rows with no key
    return [*qkv, mask]


def _notes(form: str) -> tuple[list[ChainNote], list[str]]:
    """The notes of the rewrite and the calls left in the graph after it."""
    notes: list[ChainNote] = []
    calls: list[str] = []

    def backend(gm, example_inputs):
        rewrite_attention(gm, notes=notes)
        calls.extend(getattr(n.target, "__name__", str(n.target)) for n in gm.graph.nodes)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(Forms(form), backend=backend)(*_inputs(form))
    return notes, calls


@pytest.mark.parametrize("form", REWRITTEN)
def test_each_form_becomes_one_sdpa_call_with_the_additive_mask(form):
    (got,), calls = _notes(form)
    assert got.made == "SDPA (attn_mask)", got
    assert calls.count("scaled_dot_product_attention") == 1 and "softmax" not in calls


@pytest.mark.parametrize("form", sorted(KEPT))
def test_inexact_forms_stay_with_their_reason(form):
    (got,), calls = _notes(form)
    assert got.made is None and got.reason is not None and got.reason.startswith(KEPT[form]), got
    assert "scaled_dot_product_attention" not in calls


@pytest.mark.parametrize("form", REWRITTEN)
def test_the_rewritten_forms_compute_what_eager_does_within_bf16(form):
    """Outputs and the gradients of q, k and v: SDPA keeps the scores in float32 where eager
    rounds them to bf16 once, so they agree within bf16's rounding (2 eps relative in norm)."""
    eps = torch.finfo(BF16).eps
    torch._dynamo.reset()
    compiled = torch.compile(
        Forms(form), backend=make_backend(provider=NullProvider()), options={"fallback": "eager"}
    )
    ins, ref_ins = _inputs(form, seed=1), _inputs(form, seed=1)
    out, ref = compiled(*ins), Forms(form)(*ref_ins)
    assert out.dtype == ref.dtype == BF16
    # The loss leaves out the rows with no key (padding, as labels of -100 do in training): the
    # function is constant there, and what autograd passes back through them is an artifact
    # of eager's chain and of SDPA's alike. Their outputs are compared with the others'.
    counted = (ins[3] > torch.finfo(torch.float32).min).any(-1, keepdim=True)
    (out.float() ** 2 * counted).sum().backward()
    (ref.float() ** 2 * counted).sum().backward()
    for got, want in [
        (out, ref),
        *((a.grad, b.grad) for a, b in zip(ins[:3], ref_ins[:3], strict=True)),
    ]:
        error = (got.float() - want.float()).norm() / want.float().norm()
        assert error <= 2 * eps, (form, float(error))
