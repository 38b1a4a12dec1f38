"""Probe: is CUTLASS's Hopper implicit-GEMM convolution (codegen/templates/cutlass_conv.py)
as fast as cuDNN on the corpus's dense convolutions, before it is wired into the search?

Why: issue 58's fusions (BatchNorm statistics in a conv's epilogue, its apply in the next
conv's prologue) only pay if the conv they ride on is as fast as cuDNN's alone; the Triton
templates reach 0.22-1.07x of cuDNN. CUTLASS's conv collective (TMA im2col, wgmma) and its
epilogue visitor are the route the μCUTLASS paper takes.

Per layer (ResNet-50's stages, 1x1 and 3x3, stride 1 and 2; MobileNetV2's pointwise), bf16
and float32 as TF32, channels-last, batch 32: fprop, dgrad, wgrad, each CUTLASS configuration
(tile, cluster) checked against float64 (no worse than twice cuDNN's error) and then timed
beside cuDNN (what eager and Inductor run) in interleaved rounds (runtime.timing, median).

    OUT=/tmp/out python docs/gpu_runs/2026-12-08-cutlass-conv/probe.py

Env: PROBE_ROUNDS (3), PROBE_BATCH (32). Writes $OUT/cutlass_conv.json after each layer;
prints a table last (best CUTLASS configuration against cuDNN).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from kernelpro_backend.codegen.templates.cutlass import CutlassConfigError  # noqa: E402
from kernelpro_backend.codegen.templates.cutlass_conv import (  # noqa: E402
    ENTRY_POINTS,
    CutlassConv,
)
from kernelpro_backend.runtime.cuda.host import compile_library  # noqa: E402
from kernelpro_backend.runtime.cuda.host_conv import ConvProblem, HostConv  # noqa: E402
from kernelpro_backend.runtime.errors import CandidateLoadError  # noqa: E402
from kernelpro_backend.runtime.timing import time_kernel  # noqa: E402

ROUNDS = int(os.environ.get("PROBE_ROUNDS", "3"))
BATCH = int(os.environ.get("PROBE_BATCH", "32"))
CL = torch.channels_last
# name: (c, h, w, k, r, s, padding, stride)
LAYERS = {
    "r50 s1 3x3 64": (64, 56, 56, 64, 3, 3, 1, 1),
    "r50 s1 1x1 64->256": (64, 56, 56, 256, 1, 1, 0, 1),
    "r50 s2 3x3 128 /2": (128, 56, 56, 128, 3, 3, 1, 2),
    "r50 s3 3x3 256": (256, 14, 14, 256, 3, 3, 1, 1),
    "r50 s4 1x1 2048->512": (2048, 7, 7, 512, 1, 1, 0, 1),
    "mbv2 1x1 144->24": (144, 56, 56, 24, 1, 1, 0, 1),
}
# The search's TILE_N values at one-CTA clusters (cutlass_conv_match.SPACE): 13 libraries, about
# two waves of nvcc on the GPU machine's 16 cores, so that the probe fits one device call
TILES = {
    "bfloat16": [((128, 128, 64), (1, 1)), ((128, 64, 64), (1, 1)), ((128, 256, 64), (1, 1))],
    "float32": [((128, 128, 32), (1, 1)), ((128, 64, 32), (1, 1))],
}


def configs() -> list[CutlassConv]:
    out = []
    for dtype, tiles in TILES.items():
        for op in ("fprop", "dgrad", "wgrad"):
            for tile, cluster in tiles:
                with contextlib.suppress(CutlassConfigError):  # TF32 wgrad
                    out.append(CutlassConv(op, dtype, tile, cluster))
    return out


def build_all(folder: Path) -> dict[CutlassConv, HostConv | str]:
    def build(config: CutlassConv) -> HostConv | str:
        try:
            path = compile_library(
                config.source_text(), "sm_90a", library_dir=folder, symbols=ENTRY_POINTS,
                timeout_s=900,
            )  # fmt: skip
        except Exception as e:  # a configuration CUTLASS refuses to build: recorded
            return f"build failed: {type(e).__name__}: {str(e)[:200]}"
        return HostConv(path, config.operator)

    todo = configs()
    with ThreadPoolExecutor(max(1, (os.cpu_count() or 2) // 2)) as pool:
        return dict(zip(todo, pool.map(build, todo), strict=True))


def operands(layer: str, dtype: torch.dtype):  # type: ignore[no-untyped-def]
    c, h, w, k, r, s, pad, stride = LAYERS[layer]
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(BATCH, c, h, w, device="cuda", generator=g).to(dtype)
    wt = (torch.randn(k, c, r, s, device="cuda", generator=g) / (c * r * s) ** 0.5).to(dtype)
    x, wt = x.contiguous(memory_format=CL), wt.contiguous(memory_format=CL)
    problem = ConvProblem.of(x.shape, wt.shape, (pad, pad), (stride, stride), (1, 1))
    p, q = problem.output_hw
    dy = torch.randn(BATCH, k, p, q, device="cuda", generator=g).to(dtype)
    return x, wt, dy.contiguous(memory_format=CL), problem


def cudnn(op: str, x, wt, dy, problem):  # type: ignore[no-untyped-def]
    if op == "fprop":
        return F.conv2d(x, wt, padding=problem.padding, stride=problem.stride)
    grads = torch.ops.aten.convolution_backward(
        dy, x, wt, None, problem.stride, problem.padding, (1, 1), False, (0, 0), 1,
        (op == "dgrad", op == "wgrad", False),
    )  # fmt: skip
    return grads[0] if op == "dgrad" else grads[1]


def ms(fn) -> float:  # type: ignore[no-untyped-def]
    return time_kernel(lambda: fn(), [()], torch.device("cuda")).median_ms


def run_op(layer: str, dtype_name: str, op: str, built: dict, x, wt, dy, problem) -> dict:  # type: ignore[no-untyped-def]
    """One operator of one layer: the configurations that compute it right, timed beside cuDNN."""
    act, flt = {"fprop": (x, wt), "dgrad": (dy, wt), "wgrad": (dy, x)}[op]
    exact = cudnn(op, x.double(), wt.double(), dy.double(), problem)
    eager = cudnn(op, x, wt, dy, problem)
    limit = 2 * float((eager.double() - exact).abs().max()) + 1e-3 * float(exact.abs().max())
    ok: dict[str, HostConv] = {}
    notes: dict[str, str] = {}
    for config, conv in built.items():
        if config.operator != op or config.dtype != dtype_name:
            continue
        name = f"{config.tile[0]}x{config.tile[1]}x{config.tile[2]} c{config.cluster[0]}"
        if isinstance(conv, str):
            notes[name] = conv
            continue
        try:
            err = float((conv(act, flt, problem).double() - exact).abs().max())
        except CandidateLoadError as e:
            notes[name] = str(e)[:120]
            continue
        if err > limit:
            notes[name] = f"wrong: error {err:.3g} > {limit:.3g}"
            continue
        ok[name] = conv
    times: dict[str, list[float]] = {"cudnn": [], **{n: [] for n in ok}}
    for _ in range(ROUNDS):
        times["cudnn"].append(ms(lambda: cudnn(op, x, wt, dy, problem)))
        for name, conv in ok.items():
            times[name].append(ms(lambda c=conv: c(act, flt, problem)))
    med = {n: statistics.median(t) for n, t in times.items()}
    best = min((n for n in med if n != "cudnn"), key=med.__getitem__, default=None)
    print(layer, dtype_name, op, {k: round(v, 4) for k, v in med.items()}, notes, flush=True)
    return dict(
        layer=layer, dtype=dtype_name, op=op, ms=med, best=best, notes=notes,
        x_cudnn=(med["cudnn"] / med[best]) if best else None,
    )  # fmt: skip


def run_layer(layer: str, built: dict) -> list[dict]:
    rows = []
    for dtype_name in TILES:
        x, wt, dy, problem = operands(layer, getattr(torch, dtype_name))
        for op in ("fprop", "dgrad", "wgrad"):
            rows.append(run_op(layer, dtype_name, op, built, x, wt, dy, problem))
    return rows


def main() -> int:
    if not torch.cuda.is_available():
        print("probe: no CUDA GPU here; run it on the GPU machine", file=sys.stderr)
        return 2
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    built = build_all(out / "libraries")
    failed = {str(c): v for c, v in built.items() if isinstance(v, str)}
    print(f"{len(built) - len(failed)} of {len(built)} libraries built; failed: {failed}",
          flush=True)  # fmt: skip
    rows: list[dict] = []
    for layer in LAYERS:
        rows += run_layer(layer, built)
        (out / "cutlass_conv.json").write_text(json.dumps(rows, indent=1))
    print(f"\n{'layer':24} {'dtype':9} {'op':6} {'cuDNN ms':>9} {'CUTLASS ms':>10} {'x':>6}  best")
    for r in rows:
        best = r["best"]
        got = r["ms"][best] if best else float("nan")
        x = f"{r['x_cudnn']:.2f}" if r["x_cudnn"] else "-"
        print(f"{r['layer']:24} {r['dtype']:9} {r['op']:6} {r['ms']['cudnn']:9.4f} "
              f"{got:10.4f} {x:>6}  {best or '-'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
