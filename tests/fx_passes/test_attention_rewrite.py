"""Attention written by hand is rewritten into one scaled_dot_product_attention call before
AOTAutograd, whatever the order and spelling of its scale, mask and dropout — and only when the
rewrite is exact: models train through it exactly as eager (outputs and gradients)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from kernelpro_backend import make_backend
from kernelpro_backend.fx_passes.attention_rewrite import rewrite_attention
from kernelpro_backend.rewrite.providers import NullProvider

B, H, T, D = 2, 2, 8, 16


class Attention(torch.nn.Module):
    def __init__(self, spelling: str) -> None:
        super().__init__()
        self.spelling = spelling
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))
        self.bias = torch.nn.Parameter(torch.randn(T, T) * 0.1)

    def forward(self, q, k, v):
        s = self.spelling
        if s == "nanogpt":
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
            att = att.masked_fill(~self.mask[:T, :T], float("-inf"))
            att = F.dropout(F.softmax(att, dim=-1), 0.0, self.training)
            return att @ v
        if s == "matmul_div_method_softmax":
            return torch.matmul(q, k.transpose(-1, -2)).div(math.sqrt(D)).softmax(dim=-1) @ v
        if s == "mask_then_scale":
            att = (q @ k.transpose(-2, -1)).masked_fill(self.mask == 0, float("-inf")) * 0.3
            return torch.softmax(att, -1) @ v
        if s == "additive_bias":
            return F.softmax((q @ k.transpose(-2, -1)) / 4.0 + self.bias, dim=-1) @ v
        if s == "causal_in_graph":
            keep = torch.tril(torch.ones(T, T, dtype=torch.bool, device=q.device))
            att = (q @ k.transpose(-2, -1) * 0.25).masked_fill(~keep, float("-inf"))
            return att.softmax(-1) @ v
        if s == "dropout_p":  # not exact: stays
            return F.dropout(F.softmax(q @ k.transpose(-2, -1), -1), 0.1, True) @ v
        if s == "weights_returned":  # the scores are used twice: stays
            w = F.softmax(q @ k.transpose(-2, -1), -1)
            return w @ v + w.sum()
        if s == "finite_fill":  # -1e9 is not -inf: stays
            att = (q @ k.transpose(-2, -1)).masked_fill(~self.mask, -1e9)
            return F.softmax(att, -1) @ v
        raise AssertionError(s)


REWRITTEN = [
    "nanogpt",
    "matmul_div_method_softmax",
    "mask_then_scale",
    "additive_bias",
    "causal_in_graph",
]
KEPT = ["dropout_p", "weights_returned", "finite_fill"]


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, D, generator=g, requires_grad=True) for _ in range(3)]


def _rewrites(module) -> tuple[int, str]:
    counts, code = [], []

    def backend(gm, example_inputs):
        counts.append(rewrite_attention(gm))
        code.append(gm.code)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(module, backend=backend)(*_inputs())
    return sum(counts), "\n".join(code)


@pytest.mark.parametrize("spelling", REWRITTEN)
def test_each_spelling_becomes_one_sdpa_call(spelling):
    n, code = _rewrites(Attention(spelling))
    assert n == 1 and "scaled_dot_product_attention" in code
    assert "softmax" not in code
    assert ("is_causal = True" in code) == (spelling == "causal_in_graph")


@pytest.mark.parametrize("spelling", KEPT)
def test_inexact_chains_are_left_alone(spelling):
    n, code = _rewrites(Attention(spelling))
    assert n == 0 and "scaled_dot_product_attention" not in code


# Every spelling under the eager fallback, one under Inductor (its CPU compile takes seconds).
@pytest.mark.parametrize(
    ("spelling", "fallback"),
    [*((s, "eager") for s in [*REWRITTEN, "finite_fill"]), ("nanogpt", "inductor")],
)
def test_training_through_the_backend_matches_eager(spelling, fallback):
    torch.manual_seed(0)
    model = Attention(spelling)
    eager = copy.deepcopy(model)
    torch._dynamo.reset()
    compiled = torch.compile(
        model, backend=make_backend(provider=NullProvider()), options={"fallback": fallback}
    )
    ins, ref_ins = _inputs(1), _inputs(1)
    out, ref = compiled(*ins), eager(*ref_ins)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    (out.square().sum()).backward()
    (ref.square().sum()).backward()
    for a, b in zip(ins, ref_ins, strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)
    # the additive bias is learned: its gradient flows through SDPA's attn_mask too
    torch.testing.assert_close(model.bias.grad, eager.bias.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("options", "rewritten"),
    [({}, True), ({"rewrite_attention": False}, False), ({"search": "off"}, False)],
)
def test_the_option_and_search_off_turn_it_off(options, rewritten):
    seen = []

    def observe(kind, subgraphs):
        seen.extend(sg.kind for sg in subgraphs)

    torch._dynamo.reset()
    compiled = torch.compile(
        Attention("nanogpt"),
        backend=make_backend(provider=NullProvider(), observer=observe),
        options={"fallback": "eager", **options},
    )
    compiled(*_inputs())
    assert seen and ("attention" in seen) == rewritten


@pytest.mark.parametrize("spelling", ["nanogpt", "causal_in_graph"])
def test_the_rewrite_holds_when_the_sequence_length_changes(spelling):
    """After a shape change the graph is symbolic: the rewrite still matches (no size is
    specialised by it) and every length computes what eager does."""

    class Varying(Attention):
        def forward(self, q, k, v):
            t = q.shape[-2]
            if self.spelling == "nanogpt":
                att = (q @ k.transpose(-2, -1)) * 0.25
                att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
            else:
                keep = torch.tril(torch.ones(t, t, dtype=torch.bool))
                att = (q @ k.transpose(-2, -1) * 0.25).masked_fill(~keep, float("-inf"))
            return F.softmax(att, -1) @ v

    model = Varying(spelling)
    torch._dynamo.reset()
    compiled = torch.compile(
        model, backend=make_backend(provider=NullProvider()), options={"fallback": "eager"}
    )
    for t in (8, 6, 5, 7):
        q, k, v = (torch.randn(B, H, t, D) for _ in range(3))
        torch.testing.assert_close(compiled(q, k, v), model(q, k, v), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fallback", ["eager", "inductor"])
def test_a_rewrite_that_cannot_compile_here_leaves_the_graph_as_written_and_says_why(
    fallback, caplog
):
    """Under an sdpa_kernel() context that allows no SDPA kernel of this device, the SDPA the
    rewrite would add cannot be traced: the graph compiles as the user wrote it (which needs no
    SDPA), trains like eager, and the warning and the session say why."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    model = Attention("nanogpt")
    eager = copy.deepcopy(model)
    sessions: list = []
    torch._dynamo.reset()
    compiled = torch.compile(
        model,
        backend=make_backend(provider=NullProvider(), sessions=sessions),
        options={"fallback": fallback},
    )
    ins, ref_ins = _inputs(3), _inputs(3)
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]), caplog.at_level("WARNING"):  # none on CPU
        out = compiled(*ins)
        out.square().sum().backward()
    ref = eager(*ref_ins)
    ref.square().sum().backward()
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    for a, b in zip(ins, ref_ins, strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)
    assert "compiling it as written, without them" in caplog.text
    assert "attention (1)" in caplog.text
    (session,) = sessions
    assert session.rewrites == dict.fromkeys(
        (
            "attention",
            "attention_mask",
            "attention_mask_layout",
            "linear_cross_entropy",
            "pad_gemm",
        ),
        0,
    )
    assert "scaled_dot_product_attention" in str(session.rewrite_error)
