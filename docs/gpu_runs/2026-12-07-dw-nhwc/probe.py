"""Probe: a channels-last depthwise convolution that reuses each loaded input row across the
kernel's rows, against cuDNN, forward and input gradient, at ConvNeXt-T's training sizes.

Why: in HF ConvNeXt's graph the depthwise convolutions' operands are channels-last (its blocks
permute to NHWC and back), and there cuDNN's depthwise kernels (conv2d_c1_k1_nhwc_specialized,
dgrad2d_c1_k1_nhwc_specialized) run ~15% of the FMA roof, yet the conv_depthwise templates only
tie them: a warm-up found 1.04-1.05x alone and lost in the step (H100, 2026-12-07). The
templates load every input element once per tap (49 loads per output for a 7x7) and are bound
by load issue. Here a program owns TH output rows x TW output columns x BC channels (TH
accumulators); for each kernel column kw it loads the kw-shifted input row once per input row
and adds it into every output row it feeds (up to K of them), so an output costs
K * (TH + K - 1) / TH loads (12.25 for 7x7 at TH=8) instead of K * K. Stride 1; the input
gradient of a stride-1 convolution is the same kernel run on the output gradient with the
kernel flipped and padding K - 1 - P.

Each kernel is checked first against a float32 convolution of the same bf16 operands: no
further from it than twice cuDNN's error. CUDA events, interleaved rounds, median.

    OUT=/tmp/out python docs/gpu_runs/2026-12-07-dw-nhwc/probe.py

Env: PROBE_ROUNDS (5); PROBE_CONFIGS="TH,TW,BC,warps;..." replaces the configurations (TH=16
ones did not compile within 5 minutes on the H100). Writes $OUT/dw_nhwc.json; prints a table last.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

ITERS = 20
# (name, N, C, H, W, K): ConvNeXt-T's four stages at batch 128
CASES = (
    ("s1_96x56", 128, 96, 56, 56, 7),
    ("s2_192x28", 128, 192, 28, 28, 7),
    ("s3_384x14", 128, 384, 14, 14, 7),
    ("s4_768x7", 128, 768, 7, 7, 7),
)
# (TH, TW, BC, num_warps)
CONFIGS = (
    (4, 8, 64, 4),
    (8, 8, 64, 4),
    (8, 8, 32, 2),
    (8, 16, 32, 4),
    (4, 16, 64, 4),
    (8, 4, 128, 4),
)


if os.environ.get("PROBE_CONFIGS"):  # "TH,TW,BC,warps;..."
    CONFIGS = tuple(
        tuple(int(v) for v in c.split(",")) for c in os.environ["PROBE_CONFIGS"].split(";")
    )


def source(k: int, th: int, tw: int, flip: bool) -> str:
    """The kernel for a KxK depthwise convolution, stride 1, channels-last operands (channel
    stride 1), unrolled over the kernel and the TH output rows."""
    lines = [
        "import triton",
        "import triton.language as tl",
        "",
        "@triton.jit",
        "def dw(X, Wt, Y, H, W, C, OH, OW, P, sxn, sxh, sxw, syn, syh, syw, TILES_H, TILES_W,",
        "       BC: tl.constexpr):",
        "    pid = tl.program_id(0)",
        "    n = pid // (TILES_H * TILES_W)",
        "    rem = pid % (TILES_H * TILES_W)",
        f"    oh0 = (rem // TILES_W) * {th}",
        f"    ow0 = (rem % TILES_W) * {tw}",
        "    c = tl.program_id(1) * BC + tl.arange(0, BC)",
        "    cm = c < C",
        f"    ow = ow0 + tl.arange(0, {tw})",
        "    xb = X + n.to(tl.int64) * sxn",
        f"    zw = tl.zeros(({tw},), dtype=tl.int32)  # a row index as a vector (masks)",
        "    yb = Y + n.to(tl.int64) * syn",
    ]
    lines += [f"    acc{h} = tl.zeros(({tw}, BC), dtype=tl.float32)" for h in range(th)]
    for kw in range(k):
        for kh in range(k):
            tap = (k - 1 - kh) * k + (k - 1 - kw) if flip else kh * k + kw
            lines.append(
                f"    w{kh} = tl.load(Wt + c * {k * k} + {tap}, mask=cm, other=0.0)"
                ".to(tl.float32)[None, :]"
            )
        lines += [f"    iw = ow + ({kw} - P)", "    wm = (iw >= 0) & (iw < W)"]
        lines.append("    cols = iw[:, None] * sxw + c[None, :]")
        lines.append("    colm = wm[:, None] & cm[None, :]")
        for r in range(th + k - 1):
            feeds = [(r - kh, kh) for kh in range(k) if 0 <= r - kh < th]
            lines += [
                f"    ih = oh0 + ({r} - P) + zw",
                "    xs = tl.load(xb + ih[:, None] * sxh + cols, "
                "mask=colm & ((ih >= 0) & (ih < H))[:, None], other=0.0).to(tl.float32)",
            ]
            lines += [f"    acc{h} += xs * w{kh}" for h, kh in feeds]
    lines += [
        "    om = (ow < OW)[:, None] & cm[None, :]",
        "    ocols = ow[:, None] * syw + c[None, :]",
    ]
    for h in range(th):
        lines.append(
            f"    tl.store(yb + (oh0 + {h}) * syh + ocols, acc{h}.to(Y.dtype.element_ty), "
            f"mask=om & (oh0 + {h} + zw < OH)[:, None])"
        )
    return "\n".join(lines) + "\n"


_LOADED: dict = {}


def kernel(k: int, th: int, tw: int, flip: bool):  # type: ignore[no-untyped-def]
    key = (k, th, tw, flip)
    if key not in _LOADED:
        path = Path(tempfile.mkdtemp(prefix="kp_dw_")) / f"dw_{k}_{th}_{tw}_{int(flip)}.py"
        path.write_text(source(k, th, tw, flip))
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        _LOADED[key] = module.dw
    return _LOADED[key]


def run(x: torch.Tensor, w: torch.Tensor, pad: int, cfg: tuple, flip: bool) -> torch.Tensor:
    """Depthwise stride-1 convolution of channels-last `x` (N, C, H, W) by `w` (C, 1, K, K)."""
    th, tw, bc, warps = cfg
    n, c, h, wd = x.shape
    k = w.shape[-1]
    oh, ow = h + 2 * pad - k + 1, wd + 2 * pad - k + 1
    y = torch.empty(n, c, oh, ow, dtype=x.dtype, device=x.device, memory_format=torch.channels_last)
    tiles_h, tiles_w = -(-oh // th), -(-ow // tw)
    grid = (n * tiles_h * tiles_w, -(-c // bc))
    kernel(k, th, tw, flip)[grid](
        x, w, y, h, wd, c, oh, ow, pad, x.stride(0), x.stride(2), x.stride(3),
        y.stride(0), y.stride(2), y.stride(3), tiles_h, tiles_w, BC=bc, num_warps=warps,
    )  # fmt: skip
    return y


def time_ms(fn) -> float:  # type: ignore[no-untyped-def]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(ITERS):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / ITERS


def case_rows(case: tuple, rounds: int) -> list[dict]:
    name, n, c, h, wd, k = case
    pad = k // 2
    cl = torch.channels_last
    x = torch.randn(n, c, h, wd, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=cl)
    dy = torch.randn_like(x)
    w = torch.randn(c, 1, k, k, device="cuda", dtype=torch.bfloat16) * 0.1
    ref_y = F.conv2d(x.float(), w.float(), padding=pad, groups=c)
    ref_dx = torch.ops.aten.convolution_backward(
        dy.float(), x.float(), w.float(), None, [1, 1], [pad] * 2, [1, 1], False, [0, 0], c,
        [True, False, False],
    )[0]  # fmt: skip

    def cudnn_fwd() -> torch.Tensor:
        return F.conv2d(x, w, padding=pad, groups=c)

    def cudnn_dgrad() -> torch.Tensor:
        return torch.ops.aten.convolution_backward(
            dy, x, w, None, [1, 1], [pad] * 2, [1, 1], False, [0, 0], c, [True, False, False]
        )[0]

    fns = {("fwd", "cudnn"): (cudnn_fwd, ref_y), ("dgrad", "cudnn"): (cudnn_dgrad, ref_dx)}
    for cfg in CONFIGS:
        tag = "kp_" + "x".join(map(str, cfg))
        fns[("fwd", tag)] = (lambda cfg=cfg: run(x, w, pad, cfg, False), ref_y)
        fns[("dgrad", tag)] = (lambda cfg=cfg: run(dy, w, k - 1 - pad, cfg, True), ref_dx)
    errs, ok = {}, {}
    for key, (fn, ref) in fns.items():
        try:
            out = fn()
            torch.cuda.synchronize()
            errs[key] = ((out.float() - ref).abs().max() / ref.abs().max()).item()
        except Exception as e:  # a config that does not compile: reported, not timed
            errs[key] = f"{type(e).__name__}: {str(e)[:120]}"
    for key in fns:
        base = errs[(key[0], "cudnn")]
        ok[key] = isinstance(errs[key], float) and errs[key] <= 2 * base + 1e-6
    times: dict = {key: [] for key in fns if ok[key]}
    for _ in range(rounds):
        for key in times:
            times[key].append(time_ms(fns[key][0]))
    rows = []
    for key in fns:
        ms = statistics.median(times[key]) if key in times else None
        base = statistics.median(times[(key[0], "cudnn")])
        rows.append({
            "case": name, "pass": key[0], "impl": key[1], "ms": ms, "err": errs[key],
            "checked": ok[key], "vs_cudnn": None if ms is None else base / ms,
        })  # fmt: skip
    return rows


def main() -> None:
    rounds = int(os.environ.get("PROBE_ROUNDS", "5"))
    rows = []
    for case in CASES:
        rows += case_rows(case, rounds)
        torch.cuda.empty_cache()
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}
    (out / "dw_nhwc.json").write_text(json.dumps(result, indent=1))
    print(f"{'case':<11}{'pass':<7}{'impl':<15}{'ms':>9}{'x cuDNN':>9}  err")
    for r in rows:
        ms = "-" if r["ms"] is None else f"{r['ms']:.4f}"
        vs = "-" if r["vs_cudnn"] is None else f"{r['vs_cudnn']:.2f}"
        err = r["err"] if isinstance(r["err"], str) else f"{r['err']:.2e}"
        print(f"{r['case']:<11}{r['pass']:<7}{r['impl']:<15}{ms:>9}{vs:>9}  {err}")


if __name__ == "__main__":
    main()
