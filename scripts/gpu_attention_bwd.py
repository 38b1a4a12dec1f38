#!/usr/bin/env python3
"""The attention backward template on the GPU: the real SDPA backward subgraph of a compiled
module, our kernels (default knobs and two variants) checked and timed next to eager (the aten
backward op the subgraph calls).

    OUT=/tmp/out PYTHONPATH=. python scripts/gpu_attention_bwd.py
    PYTHONPATH=. python scripts/gpu_attention_bwd.py --quick       # B=2, H=4, S=509 (GPU test)
    PYTHONPATH=. python scripts/gpu_attention_bwd.py --cpu-smoke   # tiny sizes, interpreter

Cases: B=4, H=16, S=2048, D=64 and 128, bf16, causal and not. The subgraph comes from
torch.compile(module, backend=make_backend(observer=...)) with fallback eager and search off.
Inputs are consistent: q, k, v, dO random; out and logsumexp from the matching aten forward op,
written into the subgraph's own input layouts. Correctness: ours against eager within the bf16
tolerance (rtol 1.6e-2, atol 1.6e-2 x max|eager|), and both against float32 math autograd
(max error / max |grad|). Times: triton.testing.do_bench medians. JSON goes to
$OUT/gpu_attention_bwd.json; a table is printed last. Under 3 minutes on an H100.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

if "--cpu-smoke" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported
else:
    os.environ.pop("TRITON_INTERPRET", None)

from kernelpro_backend.backend import make_backend  # noqa: E402
from kernelpro_backend.codegen import IllegalSpec, KernelSpec, build, lower  # noqa: E402
from kernelpro_backend.fx_passes import Subgraph  # noqa: E402
from kernelpro_backend.fx_passes.ops import op_name  # noqa: E402

TOL = 1.6e-2  # bf16: one ulp is 2^-7
aten = torch.ops.aten


class Attention(nn.Module):
    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.causal = causal

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)


def capture(shape: tuple[int, ...], causal: bool, device: str) -> Subgraph:
    store: list[Subgraph] = []
    backend = make_backend(observer=lambda kind, sgs: store.extend(sgs))
    torch._dynamo.reset()
    model = torch.compile(
        Attention(causal), backend=backend, options={"fallback": "eager", "search": "off"}
    )
    q, k, v = (
        torch.randn(shape, device=device, dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    # On H100 torch picks cuDNN attention for bf16, whose saved statistics the template does not
    # read (yet): capture the flash-attention graphs, the ones the backward template covers.
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if device == "cuda":
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            model(q, k, v).float().sum().backward()
    else:
        model(q, k, v).float().sum().backward()
    found = [s for s in store if s.pattern == "sdpa_backward"]
    if len(found) != 1:
        raise RuntimeError(f"expected one sdpa_backward subgraph, got {[s.pattern for s in store]}")
    return found[0]


def forward(
    name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float
):
    """(out, logsumexp) of the forward op whose backward `name` is."""
    if "for_cpu" in name:
        return aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, scale=scale)[
            :2
        ]
    if "flash" in name:
        return aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, scale=scale)[:2]
    if "efficient" in name:
        res = aten._scaled_dot_product_efficient_attention(
            q, k, v, None, True, 0.0, causal, scale=scale
        )
        return res[0], res[1]
    raise RuntimeError(f"no forward op known for {name}")


def consistent_inputs(
    sg: Subgraph, spec: KernelSpec, device: str
) -> tuple[list[torch.Tensor], dict]:
    """The subgraph's inputs with q, k, v, dO random and out, logsumexp from the forward op."""
    inputs = sg.make_inputs(seed=1, device=device)
    p = dict(spec.anchor)
    roles = {r: p[r][0] for r in ("q", "k", "v", "out", "grad_out", "lse")}
    if len(set(roles.values())) != 6 or any(p[r][1] for r in roles if r != "lse"):
        raise RuntimeError(f"operands share inputs or are offset views: {roles}")
    gen = torch.Generator(device=device).manual_seed(0)
    for r in ("q", "k", "v", "grad_out"):
        x = inputs[roles[r]]
        x.copy_(torch.randn(x.shape, generator=gen, device=device, dtype=torch.float32))
    q, k, v = (inputs[roles[r]] for r in ("q", "k", "v"))
    att = next(n for n in sg.nodes if "backward" in op_name(n))
    out, lse = forward(op_name(att), q, k, v, p["causal"], p["scale"])
    inputs[roles["out"]].copy_(out)
    inputs[roles["lse"]][..., : p["seq_q"]].copy_(lse[..., : p["seq_q"]])
    return inputs, roles


def math_grads(inputs: list[torch.Tensor], roles: dict, spec: KernelSpec) -> list[torch.Tensor]:
    """float32 autograd of math attention: [grad_q, grad_k, grad_v]."""
    q, k, v = (inputs[roles[r]].float().detach().requires_grad_() for r in ("q", "k", "v"))
    s = q @ k.transpose(-1, -2) * spec.param("scale")
    if spec.param("causal"):
        n = s.shape[-1]
        s = s.masked_fill(
            torch.ones(n, n, device=s.device, dtype=torch.bool).triu(1), float("-inf")
        )
    (s.softmax(-1) @ v).backward(inputs[roles["grad_out"]].float())
    del s
    return [x.grad for x in (q, k, v)]  # type: ignore[misc]


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float(
        (got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-30)
    )


def bench(fn, device: str) -> float:
    if device == "cpu":  # the interpreter's time means nothing; one run shows it works
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def backend_times(shape: tuple[int, ...], causal: bool, device: str) -> dict:
    """What a model pays per backend: the whole SDPA backward through autograd (the backward
    node of the forward op each backend ran), and the backend torch picks by default here."""
    if device != "cuda":
        return {}
    import contextlib

    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (
        torch.randn(shape, device=device, dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    grad_out = torch.randn(shape, device=device, dtype=torch.bfloat16)
    out: dict = {}
    try:
        names = {int(m.value): name for name, m in SDPBackend.__members__.items()}
        out["default_backend"] = names.get(int(torch._fused_sdp_choice(q, k, v, is_causal=causal)))
    except Exception as e:
        out["default_backend"] = f"unknown ({type(e).__name__}: {e})"
    for name, chosen in (
        ("flash", [SDPBackend.FLASH_ATTENTION]),
        ("cudnn", [SDPBackend.CUDNN_ATTENTION]),
        ("default", None),
    ):
        try:
            with sdpa_kernel(chosen) if chosen else contextlib.nullcontext():
                y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            out[f"{name}_autograd_bwd_ms"] = bench(
                lambda y=y: torch.autograd.grad(y, (q, k, v), grad_out, retain_graph=True), device
            )
        except Exception as e:
            out[f"{name}_autograd_bwd_ms"] = None
            out[f"{name}_error"] = f"{type(e).__name__}: {str(e)[:200]}"
    return out


def variants(spec: KernelSpec) -> list[tuple[str, KernelSpec]]:
    out = [("default", spec)]
    for label, knobs in (
        ("inner64", dict(BLOCK_M=64, BLOCK_N_DQ=64, num_stages=2)),
        ("n128", dict(BLOCK_M=64, BLOCK_N=128, BLOCK_M_DQ=128, BLOCK_N_DQ=64, num_stages=2)),
        ("s3", dict(num_stages=3)),
        ("w4", dict(num_warps=4)),
        ("w8", dict(num_warps=8)),
        ("s3w4", dict(num_stages=3, num_warps=4)),
    ):
        if all(spec.knob(k) == v for k, v in knobs.items()):
            continue  # the default already
        try:
            out.append((label, spec.with_knobs(**knobs)))  # type: ignore[arg-type]
        except IllegalSpec as e:
            print(f"  {label}: illegal ({e})")
    return out


def run_case(shape: tuple[int, ...], causal: bool, device: str) -> list[dict]:
    b, h, s, d = shape
    base = {"B": b, "H": h, "S": s, "D": d, "causal": causal, "dtype": "bfloat16"}
    try:
        sg = capture(shape, causal, device)
        spec = lower(sg)
        inputs, roles = consistent_inputs(sg, spec, device)
        ref = sg.module()
        eager = ref(*inputs)
        truth = math_grads(inputs, roles, spec)
        which = [w for w, _ in spec.param("grads")]
        eager_ms = bench(lambda: ref(*inputs), device)
        base["op"] = op_name(next(n for n in sg.nodes if "backward" in op_name(n)))
        base["eager_ms"] = eager_ms
        base["eager_vs_fp32"] = max(rel_err(e, truth[w]) for e, w in zip(eager, which, strict=True))
        base.update(backend_times(shape, causal, device))
    except Exception as e:
        traceback.print_exc()
        return [{**base, "status": f"error: {type(e).__name__}: {str(e)[:300]}"}]
    flops = 2.5 * 4 * b * h * s * s * d * (0.5 if causal else 1.0)
    rows = []
    for label, v in variants(spec):
        row = {**base, "variant": label, "knobs": dict(v.knobs)}
        try:
            t0 = time.time()
            kernel = build(v)
            got = kernel(*inputs)
            row["build_s"] = round(time.time() - t0, 2)
            row["strides_match_eager"] = all(
                g.stride() == e.stride() for g, e in zip(got, eager, strict=True)
            )
            row["ours_vs_eager"] = max(rel_err(g, e) for g, e in zip(got, eager, strict=True))
            row["ours_vs_fp32"] = max(rel_err(g, truth[w]) for g, w in zip(got, which, strict=True))
            for g, e in zip(got, eager, strict=True):
                scale = float(e.float().abs().max().clamp_min(1.0))
                torch.testing.assert_close(g.float(), e.float(), rtol=TOL, atol=TOL * scale)
            row["ours_ms"] = bench(lambda kernel=kernel: kernel(*inputs), device)
            row["speedup"] = base["eager_ms"] / row["ours_ms"]
            row["ours_tflops"] = flops / row["ours_ms"] / 1e9
            row["status"] = "ok"
        except Exception as e:  # a failing variant is a result; the others still run
            traceback.print_exc()
            row["status"] = f"error: {type(e).__name__}: {str(e)[:300]}"
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> int:
    smoke = "--cpu-smoke" in sys.argv
    if not smoke and not torch.cuda.is_available():
        print(
            "gpu_attention_bwd: no CUDA GPU here; use --cpu-smoke or the device machine",
            file=sys.stderr,
        )
        return 2
    device = "cpu" if smoke else "cuda"
    b, h, s = (1, 2, 37) if smoke else (2, 4, 509) if "--quick" in sys.argv else (4, 16, 2048)
    out_dir = os.environ.get("OUT", ".")
    os.makedirs(out_dir, exist_ok=True)
    t0 = time.time()
    rows: list[dict] = []
    for d in (16, 32) if smoke else (64, 128):
        for causal in (False, True):
            rows += run_case((b, h, s, d), causal, device)
    meta = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu (interpreter)",
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "seconds": round(time.time() - t0, 1),
    }
    with open(os.path.join(out_dir, "gpu_attention_bwd.json"), "w") as f:
        json.dump({"meta": meta, "results": rows}, f, indent=1)
    print(
        f"\n{meta['device']}  torch {meta['torch']}  triton {meta['triton']}  {meta['seconds']} s"
    )
    print(f"{'D':>4} {'causal':>6} {'variant':>10} {'eager ms':>9} {'ours ms':>9} {'speedup':>7} "
          f"{'TFLOP/s':>7} {'err/eager':>9} {'err/fp32 ours|eager':>20}  status")  # fmt: skip
    for r in rows:
        print(
            f"{r['D']:>4} {r['causal']!s:>6} {r.get('variant', '-'):>10} {r.get('eager_ms', 0):>9.3f} "
            f"{r.get('ours_ms', 0):>9.3f} {r.get('speedup', 0):>7.2f} {r.get('ours_tflops', 0):>7.1f} "
            f"{r.get('ours_vs_eager', 0):>9.2e} {r.get('ours_vs_fp32', 0):>9.2e}|{r.get('eager_vs_fp32', 0):>9.2e}  "
            f"{r['status'][:60]}"
        )  # fmt: skip
    print("\nWhole SDPA backward through autograd, per backend (ms), and torch's default choice:")
    print(f"{'D':>4} {'causal':>6} {'flash':>8} {'cudnn':>8} {'default':>8}  default backend  "
          f"best ours (kernel only)")  # fmt: skip
    seen = set()
    for r in rows:
        if (r["D"], r["causal"]) in seen or "eager_ms" not in r:
            continue
        seen.add((r["D"], r["causal"]))
        ours = [x["ours_ms"] for x in rows if (x["D"], x["causal"]) == (r["D"], r["causal"]) and "ours_ms" in x]  # fmt: skip
        t = [r.get(f"{n}_autograd_bwd_ms") for n in ("flash", "cudnn", "default")]
        cells = " ".join(f"{x:8.3f}" if x else f"{'-':>8}" for x in t)
        print(f"{r['D']:>4} {r['causal']!s:>6} {cells}  {r.get('default_backend', '-')!s:15}  "
              f"{min(ours) if ours else float('nan'):.3f}")  # fmt: skip
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
