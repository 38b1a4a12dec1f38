"""Probe: the fp32 (TF32) Triton conv templates before and after the K-major fixes, against cuDNN.

Before (branch s4-convtf32): fp32 NCHW ResNet-50 convs under cudnn.allow_tf32 ran the template
at ~70 TFLOP/s (IEEE speed; fwd 0.423 ms, wgrad 2.13 ms against cuDNN 0.139 / 0.220 at 3x3 256
ch 14x14, batch 128; BENCHMARKS.md "## Convolutions"). Causes found in the generated source:
- fwd/dgrad: the repacked weight's B tile was N-major; TF32 wgmma reads shared memory K-major
  only, so Triton transposed B into shared memory element by element. Now K-major
  (conv_pack.k_major). "old" here re-renders with k_major patched off;
- wgrad: B (the input at a tap) was rounded to tf32 in registers each step and stored back to
  shared memory. Now the input is copied rounded, dense NCHW, by one pass first (knob PACK_X,
  default 1 under tf32); "old" is PACK_X=0 (and k_major off, unused by wgrad);
- fp32 seeds: the 128x256x32 w8 s3 tile of the tf32 GEMM form ("wide");
- fwd only, not default: PACK_X=1 copies the input rounded, dense NHWC, so A tiles are
  contiguous along the channels instead of a 4-byte gather from NCHW ("x": new_x, wide_x).
Per case/direction: eager (cuDNN), old, new (the default knobs), new_wide (fwd/dgrad); each
template run checked against float64 with the project's tolerances (runtime/compare).
Times: CUDA-graph replays (the conv sweep's gpu_ms), ms a call.
Run (one H100, < 2 min): `python3 docs/gpu_runs/2026-12-06-conv-tf32/probe.py` from the repo root
(PYTHONPATH=. if the package is not installed from this tree). JSON: $OUT/conv_tf32.json; a table
last. PROBE_SMOKE=1: tiny shapes on the CPU under Triton's interpreter (checks the probe).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import pathlib
import time

SMOKE = os.environ.get("PROBE_SMOKE") == "1"
if SMOKE:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

_SWEEP = pathlib.Path(__file__).resolve().parents[1] / "2026-12-06-conv-sweep" / "probe.py"
_spec = importlib.util.spec_from_file_location("conv_sweep_probe", _SWEEP)
assert _spec is not None and _spec.loader is not None
sweep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sweep)  # its main() runs only as a script

from kernelpro_backend.codegen.templates import conv_pack  # noqa: E402
from kernelpro_backend.lowering import lower  # noqa: E402
from kernelpro_backend.runtime.spec_kernel import build_kernel  # noqa: E402

F32 = torch.float32
ALL = ("fwd", "dgrad", "wgrad")
# name: (batch, C_in, C_out, H=W, kernel, stride, padding, groups, dtype, channels_last, dirs)
CASES = {
    "r50_s3_3x3_f32": (128, 256, 256, 14, 3, 1, 1, 1, F32, False, ALL),
    "r50_s2_3x3_f32": (128, 128, 128, 28, 3, 1, 1, 1, F32, False, ALL),
    "r50_s1_1x1_reduce_f32": (128, 256, 64, 56, 1, 1, 0, 1, F32, False, ("fwd", "dgrad")),
    "r50_s3_3x3_f32_nhwc": (128, 256, 256, 14, 3, 1, 1, 1, F32, True, ALL),
}
if SMOKE:
    # CPU convolutions are IEEE (the sweep probe set allow_tf32 off): so is the kernel then, and
    # only the wgrad's input copy (PACK_X) differs between old and new
    CASES = {"smoke_3x3_f32": (2, 8, 16, 9, 3, 2, 1, 1, F32, False, ALL)}
WIDE = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=32, num_warps=8, num_stages=3)


def variants(seed, direction: str) -> dict:  # noqa: ANN001
    knobs = dict(seed.knobs)
    out = {"old": (seed.with_knobs(PACK_X=0) if "PACK_X" in knobs else seed, True)}
    out["new"] = (seed, False)
    if direction != "wgrad" and not SMOKE:
        with contextlib.suppress(Exception):  # illegal at this size
            out["new_wide"] = (seed.with_knobs(**WIDE), False)
    if direction == "fwd":  # A from the input's rounded NHWC copy (PACK_X, off by default)
        out["new_x"] = (seed.with_knobs(PACK_X=1), False)
        if "new_wide" in out:
            out["wide_x"] = (out["new_wide"][0].with_knobs(PACK_X=1), False)
    return out


def build(spec, old: bool):  # noqa: ANN001, ANN201
    """The kernel of `spec`, rendered with the N-major weight repack where `old`."""
    real = conv_pack.k_major
    if old:
        conv_pack.k_major = lambda spec: False
    try:
        return build_kernel(spec)
    finally:
        conv_pack.k_major = real


def run_case(case: tuple, direction: str) -> dict:
    sg, flops = sweep.traced(case, direction)
    inputs = sg.make_inputs(0, sweep.DEV)
    module = sg.module()
    with torch.no_grad():
        eager = list(module(*inputs))
        ref64 = list(module(*[t.double() for t in inputs]))
        res: dict = {"precision": sg.precision, "gflop": round(flops / 1e9, 2)}
        res["eager_ms"] = round(sweep.gpu_ms(lambda: module(*inputs))[0], 5)
        seed = lower(sg)
        for name, (spec, old) in variants(seed, direction).items():
            row: dict = {"knobs": dict(spec.knobs)}
            try:
                kernel = build(spec, old)
                row["err_ratio"], row["rejected"] = sweep.checked(
                    list(kernel(*inputs)), ref64, eager
                )
                row["ms"] = round(sweep.gpu_ms(lambda k=kernel: k(*inputs))[0], 5)
                row["tflops"] = round(flops / row["ms"] / 1e9, 1)
            except Exception as e:  # noqa: BLE001 - a failure is a row, not a stop
                row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            res[name] = row
    return res


def main() -> None:
    start = time.monotonic()
    results: dict = {}
    for name, case in CASES.items():
        for direction in case[-1]:
            key = f"{name}/{direction}"
            try:
                results[key] = run_case(case, direction)
            except Exception as e:  # noqa: BLE001
                results[key] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            if not SMOKE:
                torch.cuda.empty_cache()
            print(key, json.dumps(results[key])[:400], flush=True)
    meta = {
        "device": "cpu (interpreter smoke)" if SMOKE else torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "wall_s": round(time.monotonic() - start, 1),
    }
    out = pathlib.Path(os.environ.get("OUT", "."))
    (out / "conv_tf32.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    cols = ("old", "new", "new_wide", "new_x", "wide_x")
    print(f"\n{meta}\n{'case/dir':30s}{'eager':>9s}" + "".join(f"{c:>9s}" for c in cols))
    for key, r in results.items():
        cells = "".join(
            f"{r[c]['ms']:9.4f}" if c in r and "ms" in r[c] else f"{'-':>9s}" for c in cols
        )
        bad = [c for c in cols if c in r and (r[c].get("rejected") or "error" in r[c])]
        print(
            f"{key:30s}{r.get('eager_ms', float('nan')):9.4f}{cells}  {bad or r.get('error', 'all')}"
        )


if __name__ == "__main__":
    main()
