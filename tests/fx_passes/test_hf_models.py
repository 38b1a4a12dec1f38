"""Hugging Face causal LMs as their users train them — `model(input_ids, labels=labels)` under
bf16 autocast, the loss and the logits returned — reach both torch-level rewrites: the LM head
and its loss (the logits kept: the fused cross-entropy op after the GEMM), and with
`attn_implementation="eager"` the attention chain (softmax in float32, a cast back, an additive
mask, GQA's repeated k/v) as SDPA. `explain` says so, and a few training steps through the
backend follow eager's within bf16's tolerance. Tiny configs (2 layers, hidden 64, vocabulary
1000, 32 tokens) with random weights; skipped without transformers (`pip install -e .[models]`).
"""

from __future__ import annotations

import pytest
import torch

from kernelpro_backend import make_backend
from kernelpro_backend.explain import explain_model
from kernelpro_backend.fx_passes import linear_ce_rewrite
from kernelpro_backend.rewrite.providers import NullProvider

transformers = pytest.importorskip("transformers")

VOCAB, SEQ, BATCH, LAYERS = 1000, 32, 2, 2
BF16 = torch.bfloat16


@pytest.fixture(autouse=True)
def _fuse_any_width(monkeypatch):
    """The kept-logits loss at these tests' small vocabularies (the rewrite's width gate,
    FUSED_MIN_COLUMNS, is measured at real ones)."""
    monkeypatch.setattr(linear_ce_rewrite, "FUSED_MIN_COLUMNS", 0)


def tiny_llama(attn: str = "sdpa", seed: int = 0) -> torch.nn.Module:
    """A LlamaForCausalLM with grouped-query attention (4 heads, 2 for k/v)."""
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        attn_implementation=attn,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config)


class AutocastStep(torch.nn.Module):
    """The user's step as one module: the model under CPU bf16 autocast, called with labels."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.autocast("cpu", dtype=BF16):
            out = self.model(ids, labels=ids)
        return out.loss, out.logits


def _ids(seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(seed))


def tiny_llama_eager_step() -> tuple[torch.nn.Module, tuple[torch.Tensor]]:
    """For `kernelpro explain tests.fx_passes.test_hf_models:tiny_llama_eager_step`."""
    return AutocastStep(tiny_llama("eager")), (_ids(),)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_explain_shows_the_lm_head_rewrite_and_with_eager_attention_the_sdpa_rewrite(attn):
    notes: list = []
    _, made = explain_model(AutocastStep(tiny_llama(attn)), _ids(), notes=notes)
    (loss,) = [n for n in notes if n.rewrite == "linear_cross_entropy"]
    assert loss.made is not None and "kernelpro::cross_entropy" in loss.made, loss
    assert "the logits have another user: the graph's output (returned)" in loss.made
    assert made["linear_cross_entropy"] == 1
    attention = [n for n in notes if n.rewrite == "attention"]
    if attn == "eager":  # one chain per layer, each rewritten
        assert made["attention"] == LAYERS
        assert [n.made for n in attention] == ["SDPA (attn_mask)"] * LAYERS, attention
    else:  # HF calls SDPA itself: no chain to rewrite
        assert made["attention"] == 0 and not attention


def test_the_explain_command_prints_the_chains_it_looked_at(capsys):
    from kernelpro_backend.cli.main import main

    assert main(["explain", "tests.fx_passes.test_hf_models:tiny_llama_eager_step"]) == 0
    # the report wraps its lines to the terminal's width: read it with the wraps undone
    out = " ".join(capsys.readouterr().out.split())
    assert "chains the torch-level rewrites looked at:" in out
    assert "linear_cross_entropy at loss (loss_utils.py:" in out
    assert "-> the linear, then kernelpro::cross_entropy" in out
    assert out.count("attention at attn_output") == LAYERS and "-> SDPA (attn_mask)" in out


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _relative(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().float(), want.detach().float()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_training_steps_through_the_backend_follow_eager_within_bf16(attn):
    """Three SGD steps, autocast entered outside the compiled model as users do. The tolerance
    comes from bf16: SDPA and the fused loss round where eager's chain did not (scores in
    float32, the loss's gradient rounded once), an error of up to bf16's eps (2**-7) relative
    in a gradient, so: the loss within 1 eps, the logits and every gradient within 2 eps (in
    norm). A gradient of the loss 3% off, or SDPA's scale 2% off, fails it (tried)."""
    eps = torch.finfo(BF16).eps
    model, ref = tiny_llama(attn), tiny_llama(attn)
    sessions: list = []
    torch._dynamo.reset()
    compiled = torch.compile(
        model,
        backend=make_backend(provider=NullProvider(), sessions=sessions),
        options={"fallback": "eager"},
    )
    opts = [torch.optim.SGD(m.parameters(), lr=0.5) for m in (model, ref)]
    for step in range(3):
        ids = _ids(step)
        ids[0, 5] = -100  # a label to ignore (as padding is)
        outs = []
        for fn, opt in ((compiled, opts[0]), (ref, opts[1])):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=BF16):
                out = fn(ids.clamp(min=0), labels=ids)
            out.loss.backward()
            outs.append(out)
        (got, want) = outs
        assert abs(got.loss.item() - want.loss.item()) <= eps * abs(want.loss.item()), step
        assert _relative(got.logits, want.logits) <= 2 * eps, step
        grads, ref_grads = _grads(model), _grads(ref)
        assert grads.keys() == ref_grads.keys()
        worst = max(grads, key=lambda n: _relative(grads[n], ref_grads[n]))
        assert _relative(grads[worst], ref_grads[worst]) <= 2 * eps, (step, worst)
        for opt in opts:
            opt.step()
    made = {
        k: sum(s.rewrites.get(k, 0) for s in sessions)
        for k in ("attention", "linear_cross_entropy")
    }
    assert made == {"attention": LAYERS if attn == "eager" else 0, "linear_cross_entropy": 1}
