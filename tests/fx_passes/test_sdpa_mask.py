"""An SDPA mask built from positions alone is evaluated at compile time: all-attend masks are
dropped, causal ones become `is_causal=True`, and anything that reads an input (padding), is
not square, or is neither stays as written, as does a mask the graph writes in place. A mask
that crosses a graph break is dropped when the graph that made it proved it constant, and stays
when it was made eagerly. Models compute exactly what eager computes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernelpro_backend import make_backend
from kernelpro_backend.fx_passes.sdpa_mask import simplify_sdpa_masks
from kernelpro_backend.fx_passes.torch_level import ChainNote
from kernelpro_backend.rewrite.providers import NullProvider

B, H, T, D = 2, 2, 8, 16


def _positions(kind: str, q: torch.Tensor, k: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
    """Masks as libraries build them under tracing (Hugging Face's masking_utils form)."""
    L, S = q.shape[-2], k.shape[-2]
    q_idx = (torch.arange(L, device=q.device) + 0)[None, None, :, None]
    if kind == "all":  # the bidirectional mask with no padding: q_idx >= 0
        return (q_idx >= 0).expand(q.shape[0], -1, L, S)
    kv_idx = (torch.arange(S, device=q.device) + 0)[None, None, None, :]
    if kind == "causal":
        return (kv_idx <= q_idx).expand(q.shape[0], -1, L, S)
    if kind == "additive_causal":
        keep = kv_idx <= q_idx
        zero = torch.zeros((), dtype=q.dtype, device=q.device)
        return torch.where(keep, zero, torch.finfo(q.dtype).min)
    if kind == "sliding":  # constant, but neither: stays
        return ((kv_idx <= q_idx) & (q_idx - kv_idx < 3)).expand(q.shape[0], -1, L, S)
    if kind == "padding":  # reads an input: stays
        return (kv_idx <= q_idx) & pad[:, None, None, :]
    raise AssertionError(kind)


class Attention(torch.nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def forward(self, q, k, v, pad):
        mask = _positions(self.kind, q, k, pad)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _inputs(seed: int = 0, s: int = T) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, D, generator=g, requires_grad=True)
    k, v = (torch.randn(B, H, s, D, generator=g, requires_grad=True) for _ in range(2))
    pad = torch.ones(B, s, dtype=torch.bool)
    pad[0, -2:] = False
    return [q, k, v, pad]


def _simplified(kind: str, s: int = T) -> tuple[int, str, list[ChainNote]]:
    counts, code, notes = [], [], []

    def backend(gm, example_inputs):
        counts.append(simplify_sdpa_masks(gm, notes))
        code.append(gm.code)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(Attention(kind), backend=backend)(*_inputs(s=s))
    return sum(counts), "\n".join(code), notes


@pytest.mark.parametrize(
    ("kind", "made"),
    [("all", "attn_mask=None"), ("causal", "is_causal=True"), ("additive_causal", "is_causal")],
)
def test_constant_masks_are_dropped_or_made_causal(kind, made):
    n, code, notes = _simplified(kind)
    assert n == 1
    assert "attn_mask" not in code and "arange" not in code  # what built it is gone too
    assert ("is_causal = True" in code) == (kind != "all")
    assert notes and made in (notes[0].made or "")


@pytest.mark.parametrize("kind", ["sliding", "padding"])
def test_masks_that_are_not_constant_all_or_causal_stay(kind):
    n, code, notes = _simplified(kind)
    assert n == 0 and "attn_mask" in code
    # a constant that is neither is noted for explain; one that reads an input is not a candidate
    assert bool(notes) == (kind == "sliding")


def test_a_causal_pattern_over_a_non_square_score_stays():
    """SDPA's is_causal is top-left aligned: only a square score is rewritten."""
    n, code, _ = _simplified("causal", s=T + 4)
    assert n == 0 and "attn_mask" in code


def test_an_all_attend_mask_over_a_non_square_score_is_dropped():
    """Cross-attention (T5's decoder reading the encoder): queries and keys of other lengths."""
    n, code, _ = _simplified("all", s=T + 4)
    assert n == 1 and "attn_mask" not in code


@pytest.mark.parametrize("kind", ["all", "causal", "additive_causal", "padding"])
def test_training_through_the_backend_matches_eager(kind):
    torch._dynamo.reset()
    model = Attention(kind)
    compiled = torch.compile(
        model, backend=make_backend(provider=NullProvider()), options={"fallback": "eager"}
    )
    ins, ref_ins = _inputs(1), _inputs(1)
    out, ref = compiled(*ins), model(*ref_ins)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    out.square().sum().backward()
    ref.square().sum().backward()
    for a, b in zip(ins[:3], ref_ins[:3], strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)


def test_the_attention_option_turns_it_off():
    sessions: list = []
    torch._dynamo.reset()
    compiled = torch.compile(
        Attention("causal"),
        backend=make_backend(provider=NullProvider(), sessions=sessions),
        options={"fallback": "eager", "rewrite_attention": False},
    )
    compiled(*_inputs())
    assert sum(s.rewrites.get("attention_mask", 0) for s in sessions) == 0


class MaskAcrossABreak(torch.nn.Module):
    """The mask built, then a graph break (BART's and Whisper's LayerDrop draw), then SDPA: the
    second graph reads the mask as an input. `eager`: the mask is made outside any graph."""

    def __init__(self, kind: str, eager: bool = False) -> None:
        super().__init__()
        self.kind, self.eager = kind, eager

    def forward(self, q, k, v, pad):
        make = torch._dynamo.disable(_positions) if self.eager else _positions
        mask = make(self.kind, q, k, pad)
        torch._dynamo.graph_break()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize(
    ("kind", "held", "made"),
    [("all", "attends everywhere", "attn_mask=None"), ("causal", "is causal", "is_causal=True")],
)
def test_a_mask_an_earlier_graph_proved_constant_is_dropped_and_explain_says_why(kind, held, made):
    from kernelpro_backend.explain import explain_model

    notes: list[ChainNote] = []
    torch._dynamo.reset()
    _, counts = explain_model(MaskAcrossABreak(kind), *_inputs(), notes=notes)
    assert counts["attention_mask"] == 1
    (mask,) = [n for n in notes if n.rewrite == "attention_mask"]
    assert mask.made is not None
    assert f"an earlier graph's output proved to be a constant mask that {held}" in mask.made
    assert "checked on each call" in mask.made and mask.made.endswith(made)


@pytest.mark.parametrize(("kind", "held"), [("all", "attends everywhere"), ("causal", "is causal")])
def test_a_mask_made_eagerly_stays_and_explain_says_what_it_held(kind, held):
    from kernelpro_backend.explain import explain_model

    notes: list[ChainNote] = []
    torch._dynamo.reset()
    _, made = explain_model(MaskAcrossABreak(kind, eager=True), *_inputs(), notes=notes)
    assert made["attention_mask"] == 0
    (mask,) = [n for n in notes if n.rewrite == "attention_mask"]
    assert mask.made is None and "the mask is a graph input" in (mask.reason or "")
    assert f"when compiled it {held}" in (mask.reason or "")


def _written_in_place(q, k, v, pad):
    """A constant mask the graph then writes through a view: its value is not its builder's."""
    mask = torch.ones(B, 1, T, T, dtype=torch.bool)
    mask[:, :, 0][:, :, 1:] = False
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _output_written_in_place(q, k, v, pad):
    mask = torch.ones(B, 1, T, T, dtype=torch.bool)
    mask[..., 0, 1:] = False
    torch._dynamo.graph_break()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _input_written_in_place(q, k, v, pad):
    mask = torch.ones(B, 1, T, T, dtype=torch.bool)
    torch._dynamo.graph_break()
    mask[..., 0, 1:] = False
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize(
    "fn", [_written_in_place, _output_written_in_place, _input_written_in_place]
)
def test_a_mask_written_in_place_in_a_graph_stays_and_the_result_is_eagers(fn):
    sessions: list = []
    torch._dynamo.reset()
    compiled = torch.compile(
        fn, backend=make_backend(provider=NullProvider(), sessions=sessions),
        options={"fallback": "eager"},
    )  # fmt: skip
    ins = _inputs()
    torch.testing.assert_close(compiled(*ins), fn(*ins), rtol=1e-5, atol=1e-5)
    assert sum(s.rewrites.get("attention_mask", 0) for s in sessions) == 0
