"""Probe: is the attention template with an additive bias (forward, and backward with the bias's
gradient) faster than the efficient kernels SDPA runs for T5 and Swin?

Why: HF T5 and Swin pass SDPA a learned bias (T5's position bias, Swin's relative bias plus the
shifted windows' mask); flash attention takes no bias, so torch runs the memory-efficient
kernels (sm80 CUTLASS), forward and backward, which write the bias's full [B, H, Sq, Sk]
gradient. Both models trained at 1.00x of Inductor (H100, 2026-12-06): nothing of kernelpro
touched them. The templates now read a bias and write its gradient; this asks whether a tuned
tile beats the library kernels at the models' sizes before any warm-up spends time on them.

Per case: the module `BiasedAttention` (bench/models.py: SDPA with a learned [1, H, S, S] bias, plus a constant mask where
the model has one) is cut by kernelpro's partitioner (search off) with SDPA's default choice
(which kernel torch picks is recorded) and with the efficient kernels forced (the subgraphs
lowered). Each knob configuration is checked against the aten op first, then all are timed in
interleaved rounds (runtime.timing, as a search times a candidate; median of rounds).

    OUT=/tmp/out python docs/gpu_runs/2026-12-07-attention-bias/probe.py

Env: PROBE_ROUNDS (5), PROBE_ONLY (a case name). Writes $OUT/attention_bias.json after each
case; prints a table last.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from kernelpro_backend.bench.models import BiasedAttention, window_mask
from kernelpro_backend.codegen import IllegalSpec, KernelSpec, build
from kernelpro_backend.explain import find_subgraphs
from kernelpro_backend.fx_passes import Subgraph
from kernelpro_backend.fx_passes.ops import is_attention_op, op_name
from kernelpro_backend.lowering import lower
from kernelpro_backend.lowering.operands import bound_args
from kernelpro_backend.runtime.timing import time_kernel

aten = torch.ops.aten
ROUNDS = int(os.environ.get("PROBE_ROUNDS", "5"))
TOL = 1.6e-2
# name: (batch x windows, heads, seq, head dim, windows with a shifted mask (0: none), causal mask)
CASES = {
    "t5_encoder b8 h12 s1024 d64": (8, 12, 1024, 64, 0, False),
    "t5_decoder b8 h12 s256 d64 causal": (8, 12, 256, 64, 0, True),
    "swin_s1 8192x h3 s49 d32 shifted": (8192, 3, 49, 32, 64, False),
    "swin_s3 512x h12 s49 d32 shifted": (512, 12, 49, 32, 4, False),
}
FORWARD = (
    {},
    dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=2),
    dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=32, num_warps=4, num_stages=2),
    dict(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=2),
    dict(BLOCK_M=32, BLOCK_N=64, num_warps=2, num_stages=2),
)
BACKWARD = (
    {},
    dict(BLOCK_M=32, BLOCK_N=64, BLOCK_M_DQ=64, BLOCK_N_DQ=32, num_warps=4, num_stages=2),
    dict(BLOCK_M=64, BLOCK_N=64, BLOCK_M_DQ=64, BLOCK_N_DQ=64, num_warps=8, num_stages=2),
    dict(BLOCK_M=32, BLOCK_N=128, BLOCK_M_DQ=128, BLOCK_N_DQ=32, num_warps=8, num_stages=2),
    dict(DQ="atomic", BLOCK_M=32, BLOCK_N=64, num_warps=4, num_stages=2),
    dict(DQ="atomic", BLOCK_M=64, BLOCK_N=64, num_warps=8, num_stages=1),
)


def module_and_inputs(b: int, h: int, s: int, d: int, windows: int, causal: bool) -> tuple:
    mask = window_mask(b, windows, s, "cuda") if windows else None
    if causal:  # T5's decoder: HF adds a causal mask of the dtype's minimum to the bias
        m = torch.full((s, s), torch.finfo(torch.bfloat16).min, device="cuda").triu(1)
        mask = m.to(torch.bfloat16).expand(b, 1, s, s)
    qkv = [
        torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    ]
    return BiasedAttention(h, s, mask).cuda(), qkv


def cut(model: torch.nn.Module, qkv: list, backend: Any) -> list[Subgraph]:
    from torch.nn.attention import sdpa_kernel

    torch._dynamo.reset()
    if backend is None:
        return find_subgraphs(model, *qkv, train=True)
    with sdpa_kernel([backend]):
        return find_subgraphs(model, *qkv, train=True)


def consistent(sg: Subgraph, spec: KernelSpec) -> list[torch.Tensor]:
    inputs = sg.make_inputs(seed=1, device="cuda")
    if spec.template == "attention":
        return inputs
    p = dict(spec.anchor)
    att = next(n for n in sg.nodes if is_attention_op(n))
    view = bound_args(att)["attn_bias"].meta["val"]
    bias = torch.as_strided(inputs[p["bias"][0]], view.shape, view.stride(), p["bias"][1])
    q, k, v = (inputs[p[r][0]] for r in ("q", "k", "v"))
    out, lse = aten._scaled_dot_product_efficient_attention(q, k, v, bias, True, 0.0, False)[:2]
    inputs[p["out"][0]].copy_(out)
    inputs[p["lse"][0]].copy_(lse)
    return inputs


def agrees(got: Any, expected: Any) -> str | None:
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        finite = e.float()[e.float().isfinite()]
        scale = float(finite.abs().max().clamp_min(1.0)) if finite.numel() else 1.0
        try:
            torch.testing.assert_close(g.float(), e.float(), rtol=TOL, atol=TOL * scale,
                                       equal_nan=True)  # fmt: skip
        except AssertionError as err:
            return f"output {i}: {str(err).splitlines()[0]}"
    return None


def time_ms(fn: Any) -> float:
    """`fn`'s median GPU time, as the search's evaluator times a candidate."""
    return time_kernel(lambda: fn(), [()], torch.device("cuda")).median_ms


def subgraph_rows(sg: Subgraph) -> dict[str, Any]:
    spec = lower(sg)
    inputs = consistent(sg, spec)
    module = sg.module()
    expected = module(*inputs)
    runs: dict[str, Any] = {"aten": lambda: module(*inputs)}
    notes: dict[str, str] = {}
    for knobs in FORWARD if spec.template == "attention" else BACKWARD:
        label = "default" if not knobs else ",".join(f"{k}={v}" for k, v in knobs.items())
        try:
            variant = spec.with_knobs(**knobs)  # type: ignore[arg-type]
            kernel = build(variant)
            wrong = agrees(kernel(*inputs), expected)
        except IllegalSpec as err:
            notes[label] = f"illegal: {err}"
            continue
        except Exception as err:  # a compile failure is a row, not the end of the probe
            notes[label] = f"{type(err).__name__}: {str(err)[:200]}"
            continue
        if wrong:
            notes[label] = f"WRONG {wrong}"
            continue
        runs[label] = lambda kernel=kernel: kernel(*inputs)
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(ROUNDS):
        for k, fn in runs.items():
            times[k].append(time_ms(fn))
    med = {k: statistics.median(v) for k, v in times.items()}
    best = min((k for k in med if k != "aten"), key=med.__getitem__, default=None)
    return {
        "pattern": sg.pattern, "op": next(op_name(n) for n in sg.nodes if is_attention_op(n)),
        "ms": med, "best": best, "notes": notes,
        "x_aten": med["aten"] / med[best] if best else None,
    }  # fmt: skip


def main() -> None:
    from torch.nn.attention import SDPBackend

    out = Path(os.environ.get("OUT", "/tmp/attention_bias"))
    out.mkdir(parents=True, exist_ok=True)
    only = os.environ.get("PROBE_ONLY")
    results: dict[str, Any] = {"device": torch.cuda.get_device_name(), "cases": {}}
    for name, shape in CASES.items():
        if only and only not in name:
            continue
        t0 = time.time()
        model, qkv = module_and_inputs(*shape)
        chosen = sorted(
            {op_name(n) for s in cut(model, qkv, None) for n in s.nodes if is_attention_op(n)}
        )
        row: dict[str, Any] = {"default_ops": chosen, "subgraphs": []}
        for sg in cut(model, qkv, SDPBackend.EFFICIENT_ATTENTION):
            if sg.pattern in ("sdpa", "sdpa_backward"):
                try:
                    row["subgraphs"].append(subgraph_rows(sg))
                except Exception as err:
                    row["subgraphs"].append({"pattern": sg.pattern, "error": repr(err)[:400]})
        row["s"] = round(time.time() - t0, 1)
        results["cases"][name] = row
        (out / "attention_bias.json").write_text(json.dumps(results, indent=1))
        print(name, json.dumps(row)[:1500], flush=True)
    print(f"\n{results['device']}: ms, aten (efficient) against the best configuration")
    print(f"{'case':38} {'pass':14} {'aten':>8} {'best':>8} {'x':>6}  best config / default ops")
    for name, row in results["cases"].items():
        for s in row["subgraphs"]:
            if "error" in s:
                print(f"{name:38} {s['pattern']:14} ERROR {s['error'][:80]}")
                continue
            ms = s["ms"]
            best = s["best"]
            print(
                f"{name:38} {s['pattern']:14} {ms['aten']:8.3f} "
                f"{ms[best] if best else float('nan'):8.3f} {s['x_aten'] or 0:6.2f}  {best} / "
                f"{row['default_ops']}"
            )


if __name__ == "__main__":
    main()
