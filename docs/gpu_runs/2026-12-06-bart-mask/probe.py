"""Probe: a BART-base training step (BartForConditionalGeneration from its config, random
weights, bf16 autocast over float32 weights, `labels=`, fused AdamW) in eager, Inductor,
kernelpro, and kernelpro with the proven-mask registry off (its masks then cross the LayerDrop
graph breaks unproven, as before issue 57 item 2), interleaved rounds, CUDA events.

BART's LayerDrop draw (`torch.rand([]) < p` under training) breaks the graph before each layer,
so each layer's graph reads the attention masks as inputs. With the registry, the graph that
builds a mask from positions alone registers it, and the layer graphs drop the encoder's
all-True mask and the decoder's cross-attention mask from SDPA (the decoder's causal mask is
built from a `torch.ones` made eagerly in the decoder's forward: it stays). Says how many masks
each compile dropped, whether any call fell back, each mode's first loss against eager's, and
the peak memory.

    OUT=/tmp/out python docs/gpu_runs/2026-12-06-bart-mask/probe.py

Env: PROBE_MODES (comma list, default all four; inductor is the baseline), PROBE_ROUNDS
(default 5), PROBE_BATCH (default 16), PROBE_SOURCE (source tokens,
default 1024), PROBE_TARGET (target tokens, default 256), PROBE_TINY=1 (a 2-layer width-64
model, for a CPU smoke run). Writes $OUT/bart_mask.json.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from unittest import mock

import torch
import transformers

import kernelpro_backend.backend as kp_backend
from kernelpro_backend import make_backend

MODES = tuple(
    os.environ.get("PROBE_MODES", "eager,inductor,kernelpro,kernelpro-unproven").split(",")
)
ITERS = 10
FALLBACK = "this call runs the graph compiled without relying on them"
TINY = os.environ.get("PROBE_TINY") == "1"
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Fallbacks(logging.Handler):
    """Counts the calls that ran a layer graph without relying on its proven mask."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += FALLBACK in record.getMessage()


def build() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """BART-base (facebook/bart-base's shape: 6+6 layers, width 768, 12 heads, FFN 3072,
    vocabulary 50265), no dropout (every mode's first loss is compared with eager's); the
    LayerDrop draw still runs under training, so the graph breaks are there."""
    b = int(os.environ.get("PROBE_BATCH", "2" if TINY else "16"))
    s = int(os.environ.get("PROBE_SOURCE", "32" if TINY else "1024"))
    t = int(os.environ.get("PROBE_TARGET", "16" if TINY else "256"))
    d, layers, heads, ffn, vocab = (64, 2, 4, 128, 1000) if TINY else (768, 6, 12, 3072, 50265)
    config = transformers.BartConfig(
        vocab_size=vocab, d_model=d, encoder_layers=layers, decoder_layers=layers,
        encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=ffn,
        decoder_ffn_dim=ffn, max_position_embeddings=max(1024, s, t), dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, encoder_layerdrop=0.0,
        decoder_layerdrop=0.0, use_cache=False,
    )  # fmt: skip
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = transformers.BartForConditionalGeneration(config).train()
        ids = torch.randint(3, vocab, (b, s))
        labels = torch.randint(3, vocab, (b, t))
    return model, {"input_ids": ids, "labels": labels}


def compiled(model: torch.nn.Module, mode: str, sessions: list) -> torch.nn.Module:
    if mode == "eager":
        return model
    if mode == "inductor":
        return torch.compile(model, dynamic=False)
    return torch.compile(model, backend=make_backend(sessions=sessions), dynamic=False)


def unproven(mode: str) -> contextlib.AbstractContextManager:
    """While the graphs compile: for kernelpro-unproven, no graph registers its masks."""
    if mode != "kernelpro-unproven":
        return contextlib.nullcontext()
    return mock.patch.object(kp_backend, "constant_outputs", lambda gm: {})


def make_step(fn, model: torch.nn.Module, opt, inputs: dict[str, torch.Tensor]):
    def step() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
            loss = fn(**inputs).loss
        loss.backward()
        opt.step()
        return loss

    return step


def time_ms(fn, iters: int = ITERS) -> float:
    if DEVICE.type != "cuda":
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t0) * 1e3 / iters
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def peak_mib(fn) -> float | None:
    if DEVICE.type != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return round(torch.cuda.max_memory_allocated() / 2**20, 1)


def main() -> None:
    for name in ("recompile_limit", "cache_size_limit"):  # 3 compiled modes per frame
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 64)
    rounds = int(os.environ.get("PROBE_ROUNDS", "2" if TINY else "5"))
    counter = Fallbacks()
    logging.getLogger("kernelpro").addHandler(counter)
    logging.getLogger("kernelpro").setLevel(logging.DEBUG)
    steps, first_loss, compile_s, dropped, peak, graphs = {}, {}, {}, {}, {}, {}
    for mode in MODES:
        model, inputs = build()  # the same weights and inputs in every mode
        sessions: list = []
        fn = compiled(model, mode, sessions)
        fused = DEVICE.type == "cuda" or None
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused)
        steps[mode] = make_step(fn, model, opt, inputs)
        t0 = time.perf_counter()
        with unproven(mode):
            first_loss[mode] = steps[mode]().item()  # compiles forward and backward
            steps[mode]()
        if DEVICE.type == "cuda":
            torch.cuda.synchronize()
        compile_s[mode] = round(time.perf_counter() - t0, 1)
        dropped[mode] = sum(s.rewrites.get("attention_mask", 0) for s in sessions)
        graphs[mode] = len(sessions)  # kernelpro's compiles (0: another mode's graphs reused)
        peak[mode] = peak_mib(steps[mode])
        print(f"{mode}: compiled in {compile_s[mode]} s, {graphs[mode]} kernelpro graphs, "
              f"masks dropped {dropped[mode]}", flush=True)  # fmt: skip
    before = counter.count
    times: dict[str, list[float]] = {m: [] for m in MODES}
    for _ in range(rounds):
        for mode in MODES:
            times[mode].append(time_ms(steps[mode]))
    med = {m: sorted(v)[len(v) // 2] for m, v in times.items()}
    out = {
        "device": torch.cuda.get_device_name() if DEVICE.type == "cuda" else "cpu",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "shape": {k: list(v.shape) for k, v in build()[1].items()}, "tiny": TINY,
        "median_ms": med, "rounds_ms": times, "compile_s": compile_s,
        "masks_dropped": dropped, "kernelpro_graphs": graphs, "fallback_calls_timed": counter.count - before,
        "fallback_calls_total": counter.count, "first_loss": first_loss, "peak_mib": peak,
    }  # fmt: skip
    if "OUT" in os.environ:
        with open(os.path.join(os.environ["OUT"], "bart_mask.json"), "w") as f:
            json.dump(out, f, indent=1)
    print(f"\n{out['device']}  BART-base training step {out['shape']}, median ms of {ITERS} "
          f"steps x {rounds} interleaved rounds")  # fmt: skip
    print(f"{'mode':<20}{'ms':>9}{'vs base':>13}{'peak MiB':>10}{'masks':>7}{'loss-eager':>12}")
    for mode in MODES:
        rel = med.get("inductor", med["eager"]) / med[mode]
        diff = first_loss[mode] - first_loss["eager"]
        row = f"{med[mode]:>9.2f}{rel:>12.2f}x{str(peak[mode]):>10}{dropped[mode]:>7}{diff:>12.2e}"
        print(f"{mode:<20}{row}")
    print(f"calls that fell back while timed: {out['fallback_calls_timed']}")


if __name__ == "__main__":
    main()
