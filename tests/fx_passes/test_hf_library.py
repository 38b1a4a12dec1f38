"""Hugging Face models outside the bench corpus, trained as their users write the step (the
library model called with `labels=`, bf16 autocast on the CPU, three SGD steps), through the
backend against eager: each compiles, follows eager within bf16's tolerance, and makes the
torch-level rewrites its attention calls for: one `attention_mask` rewrite per SDPA call whose
mask is a constant that attends everywhere or is causal, none where the mask reads the padding
(an `attention_mask` passed by the user), and none for a sliding window shorter than the
sequence (constant, but neither). Tiny configs with random weights and no dropout; a model
class absent from the installed transformers is skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from kernelpro_backend import make_backend
from kernelpro_backend.fx_passes import linear_ce_rewrite
from kernelpro_backend.rewrite.providers import NullProvider

transformers = pytest.importorskip("transformers")

VOCAB, SEQ, BATCH, LAYERS = 1000, 32, 2, 2
BF16 = torch.bfloat16
REWRITES = ("attention", "attention_mask", "linear_cross_entropy")


@pytest.fixture(autouse=True)
def _fuse_any_width(monkeypatch):
    """The kept-logits loss at these tests' small vocabularies (as test_hf_models does)."""
    monkeypatch.setattr(linear_ce_rewrite, "FUSED_MIN_COLUMNS", 0)


def _no_dropout(config: Any) -> Any:
    """Every dropout and layer-drop probability of `config` zeroed: eager and the compiled model
    must draw nothing at random to be compared."""
    for key, value in list(vars(config).items()):
        if "drop" in key and isinstance(value, float):
            setattr(config, key, 0.0)
    return config


def _build(cls_name: str, config_name: str, **fields: Any) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        config = _no_dropout(getattr(transformers, config_name)(**fields))
        return getattr(transformers, cls_name)(config).train()

    return build


_DECODER = dict(
    vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
)  # fmt: skip


def _ids(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (BATCH, SEQ), generator=g)


def _padding() -> torch.Tensor:
    """Row 0 padded at its end (right padding, as a collator writes it)."""
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[0, -5:] = 0
    return mask


def text_inputs(seed: int, padded: bool) -> dict[str, torch.Tensor]:
    """A causal or masked LM's batch: labels are the ids, -100 where padded."""
    ids = _ids(seed)
    labels = ids.clone()
    if not padded:
        return {"input_ids": ids, "labels": labels}
    mask = _padding()
    labels[mask == 0] = -100
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def whisper_inputs(seed: int, padded: bool) -> dict[str, torch.Tensor]:
    """Log-mel features (16 bins, 32 frames) and the transcript's ids as labels."""
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(BATCH, 16, 32, generator=g)
    labels = torch.randint(3, VOCAB, (BATCH, SEQ // 2), generator=g)
    if not padded:
        return {"input_features": features, "labels": labels}
    mask = torch.ones_like(labels)
    mask[0, -3:] = 0
    labels[mask == 0] = -100
    return {"input_features": features, "labels": labels, "decoder_attention_mask": mask}


@dataclass(frozen=True)
class Case:
    """A model as built and fed, and the rewrites its step makes without padding and with."""

    build: Callable[[], torch.nn.Module]
    inputs: Callable[[int, bool], dict[str, torch.Tensor]]
    made: dict[str, int]  # no padding
    made_padded: dict[str, int]
    cls: str


def _case(cls: str, config: str, made: dict, padded: dict, inputs=text_inputs, **fields) -> Case:
    return Case(_build(cls, config, **fields), inputs, made, padded, cls)


def _made(attention: int = 0, mask: int = 0, loss: int = 1) -> dict[str, int]:
    return {"attention": attention, "attention_mask": mask, "linear_cross_entropy": loss}


CASES = {
    "llama-sdpa": _case(
        "LlamaForCausalLM", "LlamaConfig", _made(mask=LAYERS), _made(), **_DECODER
    ),
    "llama-eager": _case(
        "LlamaForCausalLM", "LlamaConfig", _made(attention=LAYERS, mask=LAYERS), _made(LAYERS),
        attn_implementation="eager", **_DECODER,
    ),
    "mistral-window-8": _case(
        "MistralForCausalLM", "MistralConfig", _made(), _made(), sliding_window=8, **_DECODER
    ),
    "mistral-window-64": _case(
        "MistralForCausalLM", "MistralConfig", _made(mask=LAYERS), _made(), sliding_window=64,
        **_DECODER,
    ),
    "mistral-window-8-eager": _case(
        "MistralForCausalLM", "MistralConfig", _made(LAYERS), _made(LAYERS), sliding_window=8,
        attn_implementation="eager", **_DECODER,
    ),
    "gpt2": _case(
        "GPT2LMHeadModel", "GPT2Config", _made(mask=LAYERS, loss=0), _made(loss=0),
        vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=LAYERS, n_head=4,
    ),
    "roberta": _case(
        "RobertaForMaskedLM", "RobertaConfig", _made(mask=LAYERS), _made(),
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=LAYERS, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=SEQ + 2,
    ),
    "distilbert": _case(
        "DistilBertForMaskedLM", "DistilBertConfig", _made(mask=LAYERS), _made(),
        vocab_size=VOCAB, dim=64, hidden_dim=128, n_layers=LAYERS, n_heads=4,
        max_position_embeddings=64,
    ),
    "bart": _case(
        "BartForConditionalGeneration", "BartConfig", _made(mask=2, loss=0), _made(loss=0),
        vocab_size=VOCAB, d_model=64, encoder_layers=LAYERS, decoder_layers=LAYERS,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
        decoder_ffn_dim=128, max_position_embeddings=64,
    ),
    "whisper": _case(
        "WhisperForConditionalGeneration", "WhisperConfig", _made(mask=2), _made(),
        inputs=whisper_inputs, vocab_size=VOCAB, num_mel_bins=16, d_model=64,
        encoder_layers=LAYERS, decoder_layers=LAYERS, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
        max_source_positions=16, max_target_positions=SEQ, pad_token_id=1, bos_token_id=2,
        eos_token_id=2, decoder_start_token_id=2,
    ),
    "gemma": _case(
        "GemmaForCausalLM", "GemmaConfig", _made(mask=LAYERS), _made(), head_dim=16, **_DECODER
    ),
    "gemma2": _case(
        "Gemma2ForCausalLM", "Gemma2Config", _made(mask=1, loss=0), _made(loss=0), head_dim=16,
        sliding_window=8,
        **_DECODER,
    ),
    "phi": _case(
        "PhiForCausalLM", "PhiConfig", _made(mask=LAYERS), _made(),
        **{k: v for k, v in _DECODER.items() if k != "num_key_value_heads"},
    ),
}  # fmt: skip


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _relative(got: torch.Tensor, want: torch.Tensor, scale: torch.Tensor | None = None) -> float:
    got, want = got.detach().float(), want.detach().float()
    norm = (want if scale is None else scale).detach().float().norm()
    return float((got - want).norm() / norm.clamp_min(1e-30))


_KEY_BIAS = (("k_proj.bias", "q_proj.bias"), ("k_lin.bias", "q_lin.bias"), (".key.", ".query."))


def _scale(name: str, grads: dict[str, torch.Tensor]) -> torch.Tensor:
    """What a gradient's error is measured against: itself, except a key projection's bias,
    whose exact gradient is zero (softmax ignores a shift along a query's row, and k's bias
    shifts every score of the row by q.b): what eager holds there is its own rounding (fp32's
    is 1e-12, bf16's 0.3 eps of the query bias's gradient on RoBERTa), so its error is measured
    against the same layer's query bias gradient, the size of what it sums."""
    for key, query in _KEY_BIAS:
        if key in name and name.replace(key, query) in grads:
            return grads[name.replace(key, query)]
    return grads[name]


def train_both(case: Case, padded: bool, steps: int = 3) -> tuple[list[str], dict[str, int]]:
    """Three SGD steps of `case` through the backend and eagerly: ([the disagreements beyond
    bf16's tolerance], {rewrite: how many the compiles made}). The tolerance is
    test_hf_models': SDPA's kernels (is_causal, no mask, a mask) and the fused loss round where
    eager's did not, up to bf16's eps relative, so the loss within 1 eps, the logits and each
    gradient within 2 eps in norm. After each step the compiled model takes eager's updated
    weights (in place, as the optimizer writes them): at lr 0.5 one step's rounding, carried
    into the next steps' weights, grew to 2x the tolerance by step 2 on RoBERTa."""
    eps = torch.finfo(BF16).eps
    model, ref = case.build(), case.build()
    sessions: list = []
    torch._dynamo.reset()
    compiled = torch.compile(
        model,
        backend=make_backend(provider=NullProvider(), sessions=sessions),
        options={"fallback": "eager"},
    )
    opts = [torch.optim.SGD(m.parameters(), lr=0.5) for m in (model, ref)]
    wrong = []
    for step in range(steps):
        outs = []
        for fn, opt in ((compiled, opts[0]), (ref, opts[1])):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=BF16):
                out = fn(**case.inputs(step, padded))
            out.loss.backward()
            outs.append(out)
        got, want = outs
        grads, ref_grads = _grads(model), _grads(ref)
        if grads.keys() != ref_grads.keys():
            wrong.append(f"step {step}: gradients of {sorted(grads.keys() ^ ref_grads.keys())}")
            break
        rel = {n: _relative(grads[n], ref_grads[n], _scale(n, ref_grads)) for n in ref_grads}
        worst = max(rel, key=rel.__getitem__)
        errors = {
            "loss": abs(got.loss.item() - want.loss.item()) / abs(want.loss.item()) / eps,
            "logits": _relative(got.logits, want.logits) / (2 * eps),
            f"grad {worst}": rel[worst] / (2 * eps),
        }
        wrong += [f"step {step}: {k} {v:.2f}x the tolerance" for k, v in errors.items() if v > 1]
        for opt in opts:
            opt.step()
        with torch.no_grad():  # each step from eager's weights: one step's rounding, not three
            for p, q in zip(model.parameters(), ref.parameters(), strict=True):
                p.copy_(q)
    made = {k: sum(s.rewrites.get(k, 0) for s in sessions) for k in REWRITES}
    return wrong, made


def _skip_absent(case: Case) -> None:
    if not hasattr(transformers, case.cls):
        pytest.skip(f"transformers {transformers.__version__} has no {case.cls}")


# Several compiles each (a graph break per layer) or 10 s and more on 2 busy cores.
SLOW = {"mistral-window-8-eager", "bart", "whisper", "gemma2", "phi"}
# Known departures from eager in bf16 that are not the rewrites' doing.
KNOWN = {
    ("whisper", True): "the decoder's key weights' gradient leaves bf16's tolerance at step 1"
    " (4.8x) with every torch-level rewrite off, and under plain Inductor too (aot_eager"
    " matches): Inductor's decompositions and joint-graph passes, which fallback='eager' runs",
}
# Known failures whose error depends on the CPU's bf16 kernels, so strict there would fail CI on
# a machine where it happens to pass: Whisper with padding failed by 4.8x on the CI machines of
# 2026-12-06 and passed on an AMD EPYC on 2026-12-07, same packages (code 4d01ada both days).
# Either way the rewrite counts are checked first, by `pytest.fail`, which no xfail of ours
# (raises=AssertionError: the gradients' check) absorbs.
PLATFORM_DEPENDENT = {("whisper", True)}


def _params() -> list[Any]:
    out = []
    for name in CASES:
        for padded in (False, True):
            marks = [pytest.mark.slow] if name in SLOW else []
            if (name, padded) in KNOWN:
                strict = (name, padded) not in PLATFORM_DEPENDENT
                reason = KNOWN[name, padded]
                marks.append(pytest.mark.xfail(reason=reason, strict=strict, raises=AssertionError))
            label = f"{name}-{'padded' if padded else 'no-padding'}"
            out.append(pytest.param(name, padded, marks=marks, id=label))
    return out


@pytest.mark.parametrize(("name", "padded"), _params())
def test_training_follows_eager_and_makes_the_rewrites_the_model_calls_for(name, padded):
    """The expected counts: one `attention_mask` rewrite per SDPA call whose mask is a constant
    all-attend or causal mask (one per layer in a decoder, one per layer in an encoder with no
    padding); none with padding (the mask reads `attention_mask`), for Mistral's window of 8
    over 32 tokens (constant, neither: it stays) or Gemma2's sliding layers. BART and Whisper's
    LayerDrop (`torch.rand([]) < p` under training) breaks the graph before each layer, so
    their masks reach the layers' graphs as inputs, made by an earlier graph: one rewrite per
    layer graph that Dynamo compiles whose mask that graph proved constant (BART: the encoder's
    layer graph, shared by its layers, and the decoder's cross-attention; not the decoder's
    causal mask, built from a `torch.ones` made eagerly in its forward, which Dynamo skips.
    Whisper: the causal mask in each of the decoder's two layer graphs); none with padding.
    One LM-head + loss rewrite, except
    GPT-2 (a logging call breaks the graph between the head and the loss), BART (the logits
    are `lm_head(x) + final_logits_bias`) and Gemma2 (its logits are soft-capped)."""
    case = CASES[name]
    _skip_absent(case)
    wrong, made = train_both(case, padded)
    expected = case.made_padded if padded else case.made
    if made != expected:
        pytest.fail(f"rewrites made {made}, expected {expected}")
    assert not wrong, wrong
