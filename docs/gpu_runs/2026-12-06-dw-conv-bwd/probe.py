"""Probe: the depthwise convolution backward template ("conv_depthwise_backward",
templates/conv_dw_bwd.py) at its default knobs against cuDNN (eager aten.convolution_backward)
and Inductor (torch.compile of the same backward subgraph), on ConvNeXt's 7x7 depthwise
(32x96x56x56, 32x384x14x14, with bias) and MobileNetV2's 3x3 (32x144x56x56 stride 1,
32x96x112x112 stride 2, no bias), float32 and bfloat16, input and weight gradients (and the
bias's where the layer has one), NCHW unless asked. Each kernel is
checked first against the float64 result of the same subgraph: no further from it than twice
cuDNN's or Inductor's error in the same dtype. CUDA events, interleaved rounds, median.

    OUT=/tmp/out python docs/gpu_runs/2026-12-06-dw-conv-bwd/probe.py

Env: PROBE_ROUNDS (default 5); PROBE_SEEDS=1 also times the template's seed configurations
(conv_rules.conv_seed_configs); PROBE_CHANNELS_LAST=1 runs channels-last operands;
PROBE_CASES (comma-separated name prefixes) picks cases; PROBE_DTYPES=bf16 or fp32 one dtype.
Writes $OUT/dw_bwd.json; prints a table last.
"""

from __future__ import annotations

import json
import os
import statistics

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from kernelpro_backend.codegen.defaults import seed_configs
from kernelpro_backend.fx_passes import find_subgraphs as fx_find_subgraphs
from kernelpro_backend.lowering import lower
from kernelpro_backend.runtime.spec_kernel import build_kernel

ITERS = 20
# (name, N, C, H, W, kernel, stride, bias)
CASES = (
    ("convnext_s1", 32, 96, 56, 56, 7, 1, True),
    ("convnext_s3", 32, 384, 14, 14, 7, 1, True),
    ("mbv2_3x3_s1", 32, 144, 56, 56, 3, 1, False),
    ("mbv2_3x3_s2", 32, 96, 112, 112, 3, 2, False),
    # ConvNeXt-T's four stages at the batch the warm-up probe trains (128)
    ("cnx128_s1", 128, 96, 56, 56, 7, 1, True),
    ("cnx128_s2", 128, 192, 28, 28, 7, 1, True),
    ("cnx128_s3", 128, 384, 14, 14, 7, 1, True),
    ("cnx128_s4", 128, 768, 7, 7, 7, 1, True),
)


def time_ms(fn, inputs: list[torch.Tensor]) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(ITERS):
        fn(*inputs)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / ITERS


def backward_subgraph(case: tuple, dtype: torch.dtype, channels_last: bool):  # type: ignore[no-untyped-def]
    """The subgraph of the convolution's backward as a training step's graph holds it (all
    three gradients; the bias's where the layer has one), traced on fake tensors."""
    _, n, c, h, w, k, stride, bias = case
    x = torch.empty(n, c, h, w, dtype=dtype)
    weight = torch.empty(c, 1, k, k, dtype=dtype)
    oh, ow = (h + 2 * (k // 2) - k) // stride + 1, (w + 2 * (k // 2) - k) // stride + 1
    dy = torch.empty(n, c, oh, ow, dtype=dtype)
    if channels_last:
        x, weight, dy = (t.contiguous(memory_format=torch.channels_last) for t in (x, weight, dy))
    mask = [True, True, bias]

    def fn(dy, x, weight):  # type: ignore[no-untyped-def]
        out = torch.ops.aten.convolution_backward(
            dy, x, weight, [c], [stride] * 2, [k // 2] * 2, [1, 1], False, [0, 0], c, mask
        )
        return tuple(out[i] for i in range(3) if mask[i])

    gm = make_fx(fn, tracing_mode="fake")(dy, x, weight)
    (sg,) = fx_find_subgraphs(gm, "backward")
    return sg


def errors(sg, inputs: list[torch.Tensor], fns: dict) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Each function's largest error over the outputs, relative to the float64 result's norm."""
    exact = sg.module()(*(t.double() if t.is_floating_point() else t for t in inputs))
    out = {}
    for name, fn in fns.items():
        got = fn(*inputs)
        out[name] = max(
            ((g.double() - x).norm() / x.norm().clamp_min(1e-30)).item()
            for g, x in zip(got, exact, strict=True)
        )
    return out


def run_case(case: tuple, dtype: torch.dtype, rounds: int, seeds: bool, cl: bool) -> list[dict]:
    sg = backward_subgraph(case, dtype, cl)
    inputs = sg.make_inputs(0, "cuda")
    spec = lower(sg)
    fns = {
        "cudnn": sg.module(),
        "inductor": torch.compile(sg.module(), dynamic=False),
        "kernelpro": build_kernel(spec),
    }
    variants = [(f"seed{i}", s) for i, s in enumerate(seed_configs(spec))] if seeds else []
    fns |= {name: build_kernel(s) for name, s in variants}
    err = errors(sg, inputs, fns)
    bound = 2 * max(err["cudnn"], err["inductor"]) + 1e-6
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn(*inputs)  # warm: compiled, autotuned, cached
    torch.cuda.synchronize()
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(time_ms(fn, inputs))
    med = {name: statistics.median(t) for name, t in times.items()}
    knobs = {"kernelpro": dict(spec.knobs)} | {name: dict(s.knobs) for name, s in variants}
    return [
        {
            "case": case[0], "dtype": str(dtype).removeprefix("torch."), "channels_last": cl,
            "impl": name, "ms": round(med[name], 4),
            "vs_cudnn": round(med["cudnn"] / med[name], 3),
            "vs_inductor": round(med["inductor"] / med[name], 3),
            "rel_err": err[name], "ok": err[name] <= bound, "knobs": knobs.get(name),
        }
        for name in fns
    ]  # fmt: skip


def main() -> None:
    rounds = int(os.environ.get("PROBE_ROUNDS", "5"))
    seeds = os.environ.get("PROBE_SEEDS") == "1"
    cl = os.environ.get("PROBE_CHANNELS_LAST") == "1"
    picked = [c for c in os.environ.get("PROBE_CASES", "").split(",") if c]
    cases = [c for c in CASES if not picked or any(c[0].startswith(p) for p in picked)]
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    wanted = os.environ.get("PROBE_DTYPES", "fp32,bf16").split(",")
    rows = []
    for dtype in (dtypes[d] for d in wanted):
        for case in cases:
            rows += run_case(case, dtype, rounds, seeds, cl)
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, "dw_bwd.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    print(f"{'case':12} {'dtype':9} {'impl':10} {'ms':>8} {'xcudnn':>7} {'xind':>6} {'err':>9} ok")
    for r in rows:
        print(
            f"{r['case']:12} {r['dtype']:9} {r['impl']:10} {r['ms']:8.4f} {r['vs_cudnn']:7.3f} "
            f"{r['vs_inductor']:6.3f} {r['rel_err']:9.2e} {'yes' if r['ok'] else 'NO'}"
        )


if __name__ == "__main__":
    main()
