#!/usr/bin/env python3
"""Every codegen template at realistic sizes on the GPU: correctness against PyTorch and time
next to eager and torch.compile (Inductor default), all from the same run.

    OUT=/tmp/out PYTHONPATH=. python scripts/gpu_codegen.py [--quick]
    PYTHONPATH=. python scripts/gpu_codegen.py --cpu-smoke   # tiny sizes, Triton interpreter

For each case the model is compiled through the kernelpro backend (fallback eager, search off)
to get its subgraphs; the interesting one is lowered with default knobs, built, checked on
fresh random inputs (tolerance by dtype) and timed with triton.testing.do_bench (median ms).
Eager runs the subgraph's reference module; Inductor compiles that same module. Results go
to $OUT/gpu_codegen.json; a short table is printed last. Default specs need not win.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kernelpro_backend.backend import make_backend  # noqa: E402
from kernelpro_backend.codegen import build, lower  # noqa: E402
from kernelpro_backend.examples import RMSNorm  # noqa: E402
from kernelpro_backend.fx_passes import Subgraph  # noqa: E402
from kernelpro_backend.fx_passes.partition import Group  # noqa: E402
from kernelpro_backend.fx_passes.subgraph import _from_group  # noqa: E402

DEVICE = "cuda"
TOL = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}


def collect(model: nn.Module, inputs: tuple) -> list[Subgraph]:
    store: list[Subgraph] = []
    backend = make_backend(observer=lambda kind, sgs: store.extend(sgs))
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=backend, options={"fallback": "eager", "search": "off"})(
            *inputs
        )
    return store


def traced_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> Subgraph:
    """The partitioner skips SDPA forward ops (they carry the nondeterministic_seeded tag), so
    the attention subgraph is traced directly."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor]:
        return (F.scaled_dot_product_attention(q, k, v, is_causal=causal),)

    gm = make_fx(sdpa, tracing_mode="fake")(q, k, v)
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    group = Group(nodes=nodes, mask=0, attention=True)
    return _from_group(group, "inference", "ieee")


def low_dtype(sg: Subgraph) -> torch.dtype:
    names = {dt for _, _, dt in (*sg.input_meta, *sg.output_meta)}
    return (
        torch.bfloat16
        if "bfloat16" in names
        else torch.float16
        if "float16" in names
        else torch.float32
    )


def check(sg: Subgraph, kernel: Callable, seed: int) -> float:
    """Max error relative to the output scale; raises when outside the dtype tolerance."""
    inputs = sg.make_inputs(seed, DEVICE)
    expected = sg.module()(*inputs)
    got = kernel(*inputs)
    tol = TOL[low_dtype(sg)]
    worst = 0.0
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape and g.stride() == e.stride() and g.dtype == e.dtype
        finite = e.float()[e.float().isfinite()]
        scale = max(1.0, finite.abs().max().item()) if finite.numel() else 1.0
        torch.testing.assert_close(g.float(), e.float(), rtol=tol, atol=tol * scale, equal_nan=True)
        worst = max(worst, ((g.float() - e.float()).abs().nan_to_num(0).max().item()) / scale)
    return worst


def bench(fn: Callable[[], object]) -> float:
    if DEVICE == "cpu":  # smoke mode: the interpreter's times mean nothing; one run shows it works
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def run_case(name: str, sg: Subgraph) -> dict:
    row: dict = {"case": name, "pattern": sg.pattern, "inputs": [list(m[0]) for m in sg.input_meta]}
    try:
        spec = lower(sg)
        row.update(template=spec.template, knobs=dict(spec.knobs), precision=spec.precision)
        t0 = time.time()
        kernel = build(spec)
        row["max_rel_error"] = check(sg, kernel, seed=1)
        row["build_s"] = round(time.time() - t0, 2)
        inputs = sg.make_inputs(2, DEVICE)
        ref = sg.module()
        row["ours_ms"] = bench(lambda: kernel(*inputs))
        row["eager_ms"] = bench(lambda: ref(*inputs))
        if DEVICE == "cuda":
            inductor = torch.compile(sg.module())
            inductor(*inputs)
            row["inductor_ms"] = bench(lambda: inductor(*inputs))
        row["status"] = "ok"
    except Exception as e:  # a failing case is a result, the others still run
        row["status"] = f"error: {type(e).__name__}: {str(e)[:300]}"
        traceback.print_exc()
    return row


def biggest(sgs: list[Subgraph], kind: str | None = None) -> Subgraph:
    pool = [s for s in sgs if kind is None or s.kind == kind]
    return max(pool, key=lambda s: sum(torch.Size(m[0]).numel() for m in s.input_meta))


def cases(size: str) -> list[tuple[str, Callable[[], Subgraph]]]:
    n, rows, cols, vocab, seq = {
        "full": (4096, 8192, 8192, 32000, 2048),
        "quick": (1024, 2048, 2048, 8000, 512),
        "tiny": (48, 24, 40, 300, 40),
    }[size]
    dev = DEVICE

    def linear_gelu(dt: torch.dtype) -> Subgraph:
        model = nn.Sequential(nn.Linear(n, n), nn.GELU()).to(dev, dt)
        return biggest(collect(model, (torch.randn(n, n, device=dev, dtype=dt),)), "gemm")

    def norm(module: nn.Module, dt: torch.dtype) -> Subgraph:
        return biggest(
            collect(module.to(dev, dt), (torch.randn(rows, cols, device=dev, dtype=dt),))
        )

    def cross_entropy() -> Subgraph:
        class CE(nn.Module):
            def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
                return F.cross_entropy(x, t)

        x = torch.randn(rows, vocab, device=dev, dtype=torch.bfloat16)
        t = torch.randint(0, vocab, (rows,), device=dev)
        return biggest(collect(CE(), (x, t)), "reduction")

    def attention(d: int, causal: bool) -> Subgraph:
        heads = 16 if dev == "cuda" else 2
        q, k, v = (
            torch.randn(2, heads, seq, d, device=dev, dtype=torch.bfloat16) for _ in range(3)
        )
        return traced_attention(q, k, v, causal)

    f32, bf16 = torch.float32, torch.bfloat16
    return [
        (f"linear+gelu {n}^3 fp32", lambda: linear_gelu(f32)),
        (f"linear+gelu {n}^3 bf16", lambda: linear_gelu(bf16)),
        (f"layernorm {rows}x{cols} fp32", lambda: norm(nn.LayerNorm(cols), f32)),
        (f"layernorm {rows}x{cols} bf16", lambda: norm(nn.LayerNorm(cols), bf16)),
        (f"rmsnorm {rows}x{cols} fp32", lambda: norm(RMSNorm(cols), f32)),
        (f"softmax {rows}x{cols} fp32", lambda: norm(nn.Softmax(-1), f32)),
        (f"softmax {rows}x{cols} bf16", lambda: norm(nn.Softmax(-1), bf16)),
        (f"cross-entropy {rows}x{vocab} bf16", cross_entropy),
        (f"attention s{seq} d64 bf16 causal", lambda: attention(64, True)),
        (f"attention s{seq} d128 bf16", lambda: attention(128, False)),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    parser.add_argument(
        "--cpu-smoke",
        action="store_true",
        help="tiny sizes on the CPU through Triton's interpreter",
    )
    parser.add_argument(
        "--only", action="append", default=[], metavar="TEXT",
        help="run only the cases whose name contains TEXT (repeatable)",
    )  # fmt: skip
    args = parser.parse_args()
    global DEVICE
    if args.cpu_smoke:
        DEVICE = "cpu"
        os.environ["TRITON_INTERPRET"] = "1"
    elif not torch.cuda.is_available():
        print("gpu_codegen: no CUDA GPU here; run it on the device machine", file=sys.stderr)
        return 2
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    out_dir = os.environ.get("OUT", ".")
    os.makedirs(out_dir, exist_ok=True)
    rows = []
    size = "tiny" if args.cpu_smoke else "quick" if args.quick else "full"
    chosen = [(n, m) for n, m in cases(size) if not args.only or any(t in n for t in args.only)]
    if not chosen:
        print(f"gpu_codegen: no case matches {args.only}", file=sys.stderr)
        return 2
    for name, make in chosen:
        try:
            sg = make()
        except Exception as e:
            rows.append({"case": name, "status": f"error collecting: {type(e).__name__}: {e}"})
            continue
        rows.append(run_case(name, sg))
        print(json.dumps(rows[-1]), flush=True)
    meta = {
        "device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (interpreter)",
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    with open(os.path.join(out_dir, "gpu_codegen.json"), "w") as f:
        json.dump({"meta": meta, "results": rows}, f, indent=1)
    print(
        f"\n{meta['device']}  torch {meta['torch']}  triton {meta['triton']}  (median ms, do_bench)"
    )
    print(f"{'case':38} {'template':13} {'ours':>8} {'eager':>8} {'inductor':>8}  status")
    for r in rows:
        ms = [
            f"{r[k]:8.3f}" if k in r else f"{'-':>8}"
            for k in ("ours_ms", "eager_ms", "inductor_ms")
        ]
        print(f"{r['case']:38} {r.get('template', '-'):13} {' '.join(ms)}  {r['status'][:60]}")
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
