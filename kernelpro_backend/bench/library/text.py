"""The corpus's language models from `transformers`: BERT, T5, BART, Whisper, Qwen2 and GPT-NeoX
(Pythia) training steps as their users write them.

Owns: one factory per model, `(device, dtype, size) -> Workload`, with the published
configuration of a real checkpoint at "full" (random weights: nothing is downloaded) and a
2-layer, width-64 one at "tiny" (CPU tests), and the inputs and `labels=` its users pass.
Must not: import `transformers` at import time (a factory imports it, so the bench imports
without the extra), download anything, or time and compare (the runner does).

Each step: the library model called with `labels=` under bf16 autocast on CUDA (float32 weights,
fused AdamW), returning what it returns (loss, logits, ...); the bench's loss is `.loss`.
Dropout is 0: the bench checks every mode's first step against eager, and a compiled graph
draws other random masks than eager (Pythia and Qwen2 train without dropout anyway). LayerDrop
(BART, Whisper) keeps its config default, 0.0: the draw `torch.rand([]) < layerdrop` still runs
before each layer under training, and breaks the Dynamo graph there, as in users' steps.
Peak memory at "full" (each factory's docstring): the eager bf16 step's, weights and AdamW state
included, estimated with fake tensors and torch's MemTracker (CPU autocast standing in for CUDA's;
BART's and Whisper's LayerDrop draw made a real scalar so that its branch can be taken).
"""

from __future__ import annotations

from typing import Any

import torch

from ..workload import Workload, check_size
from .step import LibraryStep, adamw, autocast_dtype, autocast_for, require, returned_loss, seeded

# The tiny shapes every text model shares: 2 layers, width 64, sequence 32, batch 2.
TINY = dict(b=2, t=32, d=64, layers=2, heads=4, ffn=128, vocab=256)


def _workload(
    name: str,
    model: torch.nn.Module,
    inputs: dict[str, torch.Tensor],
    device: torch.device,
    dtype: torch.dtype,
    size: str,
) -> Workload:
    step = LibraryStep(model, tuple(inputs), device, autocast_for(dtype))
    return Workload(
        name, step, tuple(inputs.values()), dtype, size, returned_loss, adamw, source="library"
    )


def _ids(vocab: int, *shape: int, device: torch.device) -> torch.Tensor:
    return torch.randint(0, vocab, shape, device=device)


def hf_bert(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """BERT-base masked-LM training step (BertForMaskedLM, labels on 15% of the tokens, the rest
    -100): batch 32 x sequence 512, vocabulary 30522; peak ~14 GiB at "full"."""
    check_size(size)
    tf = require("transformers")
    dt = autocast_dtype(device, dtype)
    p: dict[str, Any] = (
        dict(TINY, heads=2)
        if size == "tiny"
        else dict(b=32, t=512, d=768, layers=12, heads=12, ffn=3072, vocab=30522)
    )
    config = tf.BertConfig(
        vocab_size=p["vocab"], hidden_size=p["d"], num_hidden_layers=p["layers"],
        num_attention_heads=p["heads"], intermediate_size=p["ffn"],
        max_position_embeddings=max(512, p["t"]),
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    with seeded(device):
        model = tf.BertForMaskedLM(config)
        ids = _ids(p["vocab"], p["b"], p["t"], device=device)
        masked = torch.rand(p["b"], p["t"], device=device) < 0.15
        masked[:, 0] = True  # at least one label per row
        labels = torch.where(masked, ids, torch.full_like(ids, -100))
        ids = torch.where(masked, torch.full_like(ids, 103), ids)  # [MASK], as the collator does
    return _workload("hf_bert", model, dict(input_ids=ids, labels=labels), device, dt, size)


def hf_t5(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """Flan-T5-base training step (T5ForConditionalGeneration: gated-GELU, untied head, relative
    position bias): batch 8, 1024 input and 256 target tokens, vocabulary 32128; peak ~16 GiB."""
    check_size(size)
    tf = require("transformers")
    dt = autocast_dtype(device, dtype)
    p: dict[str, Any] = (
        dict(TINY, target=16)
        if size == "tiny"
        else dict(b=8, t=1024, target=256, d=768, layers=12, heads=12, ffn=2048, vocab=32128)
    )
    config = tf.T5Config(
        vocab_size=p["vocab"], d_model=p["d"], d_kv=p["d"] // p["heads"], d_ff=p["ffn"],
        num_layers=p["layers"], num_decoder_layers=p["layers"], num_heads=p["heads"],
        feed_forward_proj="gated-gelu", tie_word_embeddings=False, dropout_rate=0.0,
        use_cache=False, decoder_start_token_id=0, pad_token_id=0,
    )  # fmt: skip
    with seeded(device):
        model = tf.T5ForConditionalGeneration(config)
        ids = _ids(p["vocab"], p["b"], p["t"], device=device)
        labels = _ids(p["vocab"], p["b"], p["target"], device=device)
    return _workload("hf_t5", model, dict(input_ids=ids, labels=labels), device, dt, size)


def hf_bart(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """BART-base training step (BartForConditionalGeneration: 6+6 post-norm layers, width 768,
    12 heads, FFN 3072, learned positions, tied head over a vocabulary of 50265, not a multiple
    of 8): batch 16, 1024 source and 256 target tokens, 139M parameters; peak ~9 GiB at "full"
    (8.5 GiB estimated: 5.4 of activations).
    BartConfig's defaults are kept (attention and activation dropout 0, LayerDrop 0, whose draw
    still breaks the graph before every layer) except `dropout`, 0.1 by default, set to 0."""
    check_size(size)
    tf = require("transformers")
    dt = autocast_dtype(device, dtype)
    p: dict[str, Any] = (
        dict(TINY, target=16)
        if size == "tiny"
        else dict(b=16, t=1024, target=256, d=768, layers=6, heads=12, ffn=3072, vocab=50265)
    )
    config = tf.BartConfig(
        vocab_size=p["vocab"], d_model=p["d"], encoder_layers=p["layers"],
        decoder_layers=p["layers"], encoder_attention_heads=p["heads"],
        decoder_attention_heads=p["heads"], encoder_ffn_dim=p["ffn"], decoder_ffn_dim=p["ffn"],
        max_position_embeddings=1024, dropout=0.0, use_cache=False,
    )  # fmt: skip
    with seeded(device):
        model = tf.BartForConditionalGeneration(config)
        # Token ids from 3 on: 0-2 are BART's <s>, <pad> and </s>.
        ids = torch.randint(3, p["vocab"], (p["b"], p["t"]), device=device)
        labels = torch.randint(3, p["vocab"], (p["b"], p["target"]), device=device)
    # labels= only: the model shifts them right into its decoder inputs, as users rely on.
    return _workload("hf_bart", model, dict(input_ids=ids, labels=labels), device, dt, size)


def hf_whisper(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """Whisper-small training step (WhisperForConditionalGeneration: two convs over 80 mel bins
    x 3000 frames (30 s), 12+12 pre-norm layers of width 768 over 1500 audio positions, 12
    heads, FFN 3072, tied head over a vocabulary of 51865, not a multiple of 8): batch 16 of
    random log-mel features, 128 label tokens (a 30 s utterance's transcript), 242M parameters;
    peak ~16 GiB at "full" (15.9 GiB estimated: 12.4 of activations). WhisperConfig's defaults are kept: every dropout and LayerDrop 0 (whose draw still
    breaks the graph before every layer). "tiny": 16 mel bins x 64 frames (32 positions)."""
    check_size(size)
    tf = require("transformers")
    dt = autocast_dtype(device, dtype)
    p: dict[str, Any] = (
        dict(TINY, mels=16, positions=32, target=16, start=1, pad=0)
        if size == "tiny"
        else dict(
            b=16, d=768, layers=12, heads=12, ffn=3072, vocab=51865, mels=80, positions=1500,
            target=128, start=50258, pad=50257,
        )
    )  # fmt: skip
    config = tf.WhisperConfig(
        vocab_size=p["vocab"], num_mel_bins=p["mels"], d_model=p["d"],
        encoder_layers=p["layers"], decoder_layers=p["layers"],
        encoder_attention_heads=p["heads"], decoder_attention_heads=p["heads"],
        encoder_ffn_dim=p["ffn"], decoder_ffn_dim=p["ffn"],
        max_source_positions=p["positions"], max_target_positions=448,
        decoder_start_token_id=p["start"], pad_token_id=p["pad"], bos_token_id=p["pad"],
        eos_token_id=p["pad"], use_cache=False,
    )  # fmt: skip
    with seeded(device):
        model = tf.WhisperForConditionalGeneration(config)
        # The encoder's two convs (strides 1, 2) take 2 frames to a position.
        features = torch.randn(p["b"], p["mels"], 2 * p["positions"], device=device)
        labels = _ids(p["vocab"], p["b"], p["target"], device=device)
    inputs = dict(input_features=features, labels=labels)
    return _workload("hf_whisper", model, inputs, device, dt, size)


def _causal_lm(
    name: str, model_cls: str, config: Any, p: dict[str, Any], device: torch.device,
    dtype: torch.dtype, size: str,
) -> Workload:  # fmt: skip
    tf = require("transformers")
    with seeded(device):
        model = getattr(tf, model_cls)(config)
        ids = _ids(p["vocab"], p["b"], p["t"], device=device)
    # labels=input_ids: the model shifts them itself, as its users rely on.
    return _workload(name, model, dict(input_ids=ids, labels=ids), device, dtype, size)


def hf_qwen2(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """Qwen2-0.5B training step (Qwen2ForCausalLM: GQA 14/2 heads, RoPE, RMSNorm, SwiGLU, tied
    embeddings): batch 4 x sequence 2048, vocabulary 151936; peak ~36 GiB at "full"."""
    check_size(size)
    tf = require("transformers")
    dt = autocast_dtype(device, dtype)
    p: dict[str, Any] = (
        dict(TINY, kv=2)
        if size == "tiny"
        else dict(b=4, t=2048, d=896, layers=24, heads=14, kv=2, ffn=4864, vocab=151936)
    )
    config = tf.Qwen2Config(
        vocab_size=p["vocab"], hidden_size=p["d"], intermediate_size=p["ffn"],
        num_hidden_layers=p["layers"], num_attention_heads=p["heads"],
        num_key_value_heads=p["kv"], max_position_embeddings=32768, rope_theta=1e6,
        rms_norm_eps=1e-6, tie_word_embeddings=True, use_cache=False,
    )  # fmt: skip
    return _causal_lm("hf_qwen2", "Qwen2ForCausalLM", config, p, device, dt, size)


def hf_gpt_neox(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """Pythia-410M training step (GPTNeoXForCausalLM: parallel residual, partial rotary 25%,
    LayerNorm, GELU): batch 8 x sequence 2048, vocabulary 50304; peak ~32 GiB at "full"."""
    check_size(size)
    tf = require("transformers")
    dt = autocast_dtype(device, dtype)
    p: dict[str, Any] = (
        TINY
        if size == "tiny"
        else dict(b=8, t=2048, d=1024, layers=24, heads=16, ffn=4096, vocab=50304)
    )
    config = tf.GPTNeoXConfig(
        vocab_size=p["vocab"], hidden_size=p["d"], num_hidden_layers=p["layers"],
        num_attention_heads=p["heads"], intermediate_size=p["ffn"], rotary_pct=0.25,
        max_position_embeddings=2048, use_parallel_residual=True, tie_word_embeddings=False,
        hidden_dropout=0.0, attention_dropout=0.0, use_cache=False,
    )  # fmt: skip
    return _causal_lm("hf_gpt_neox", "GPTNeoXForCausalLM", config, p, device, dt, size)
