"""Probe: the convolution templates (codegen/templates/conv.py, conv_bwd.py) on the GPU against
eager (cuDNN) and Inductor: ResNet-50 stage convs (3x3 and 1x1, batch 32, float32 NCHW under
PyTorch's default TF32 conv policy and bf16 channels-last), ConvNeXt's 7x7 depthwise, MobileNet's
depthwise 3x3 and pointwise 1x1, a KernelBench-like conv + bias + ReLU, forward with the
epilogue (bias + ReLU, + residual where marked) and the backward (dgrad + wgrad + bias grad).

Per case: the conv subgraph the partitioner cuts from the traced function, its kernelpro
candidates (the lowered seed and the template's seed tiles: codegen_space's own list) each
built, checked against eager (relative max error) and timed briefly; then eager, Inductor, the
seed and the best candidate in interleaved rounds of CUDA-event timing (median ms). For the
first cases while time allows, kernelpro end to end: torch.compile(backend="kernelpro") with
search on-miss, a small budget, a fresh cache directory in /tmp. JSON to $OUT/conv_sweep.json,
a table last. PROBE_SMOKE=1: tiny shapes on the CPU under Triton's interpreter (eager and the
candidates only), to check the probe itself.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time

SMOKE = os.environ.get("PROBE_SMOKE") == "1"
if SMOKE:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from kernelpro_backend.backend import kernelpro  # noqa: E402  (backend="kernelpro")
from kernelpro_backend.codegen import seed_configs  # noqa: E402
from kernelpro_backend.fx_passes import find_subgraphs  # noqa: E402
from kernelpro_backend.lowering import lower  # noqa: E402
from kernelpro_backend.runtime.spec_kernel import build_kernel  # noqa: E402

DEV = "cpu" if SMOKE else "cuda"
START = time.monotonic()
SEARCH_UNTIL_S = 100.0  # no end-to-end search starts after this many seconds
CANDIDATES = 5  # the seed and this many less one of its seed tiles
BF16, F32 = torch.bfloat16, torch.float32

# name: (batch, C_in, C_out, H=W, kernel, stride, padding, groups, dtype, channels_last,
#        residual, backward)
CASES = {
    "r50_3x3_f32": (32, 128, 128, 28, 3, 1, 1, 1, F32, False, False, True),
    "r50_3x3_bf16_cl": (32, 128, 128, 28, 3, 1, 1, 1, BF16, True, False, True),
    "r50_3x3_s2_bf16_cl": (32, 128, 128, 56, 3, 2, 1, 1, BF16, True, False, False),
    "r50_1x1_reduce_bf16_cl": (32, 256, 64, 56, 1, 1, 0, 1, BF16, True, False, True),
    "r50_1x1_expand_res_bf16_cl": (32, 64, 256, 56, 1, 1, 0, 1, BF16, True, True, False),
    "r50_1x1_expand_res_f32": (32, 64, 256, 56, 1, 1, 0, 1, F32, False, True, False),
    "convnext_dw7x7_bf16_cl": (32, 96, 96, 56, 7, 1, 3, 96, BF16, True, False, False),
    "convnext_dw7x7_f32": (32, 96, 96, 56, 7, 1, 3, 96, F32, False, False, False),
    "mobilenet_dw3x3_bf16_cl": (64, 144, 144, 56, 3, 1, 1, 144, BF16, True, False, False),
    "mobilenet_pw1x1_bf16_cl": (64, 144, 24, 56, 1, 1, 0, 1, BF16, True, False, False),
    "kb_conv_bias_relu_f32": (128, 3, 16, 32, 3, 1, 0, 1, F32, False, False, False),
}
if SMOKE:  # tiny versions of two of them, forward and backward
    CASES = {
        "smoke_3x3": (2, 8, 16, 9, 3, 1, 1, 1, F32, False, True, True),
        "smoke_dw_cl": (2, 8, 8, 9, 3, 1, 1, 8, BF16, True, False, False),
    }


def _forward_fn(stride: int, padding: int, groups: int, residual: bool):  # noqa: ANN202
    def fwd(x, w, b, r):  # noqa: ANN001, ANN202
        y = F.relu(F.conv2d(x, w, b, stride=stride, padding=padding, groups=groups))
        return (y + r,) if residual else (y,)

    return fwd


def _backward_fn(c_out: int, stride: int, padding: int, groups: int):  # noqa: ANN202
    def bwd(dy, x, w):  # noqa: ANN001, ANN202
        return torch.ops.aten.convolution_backward(
            dy, x, w, [c_out], [stride] * 2, [padding] * 2, [1, 1], False, [0, 0], groups,
            [True, True, True],
        )  # fmt: skip

    return bwd


def _tensors(case: tuple, backward: bool) -> tuple:
    n, cin, cout, hw, k, stride, pad, groups, dtype, cl, residual, _ = case
    fmt = torch.channels_last if cl else torch.contiguous_format
    x = torch.randn(n, cin, hw, hw, device=DEV, dtype=dtype).to(memory_format=fmt)
    w = torch.randn(cout, cin // groups, k, k, device=DEV, dtype=dtype).to(memory_format=fmt)
    b = torch.randn(cout, device=DEV, dtype=dtype)
    out = (hw + 2 * pad - k) // stride + 1
    y = torch.randn(n, cout, out, out, device=DEV, dtype=dtype).to(memory_format=fmt)
    if backward:
        return _backward_fn(cout, stride, pad, groups), (y, x, w)
    fn = _forward_fn(stride, pad, groups, residual)
    return fn, (x, w, b, y)


def conv_subgraph(fn, inputs):  # noqa: ANN001, ANN201
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    found = [s for s in find_subgraphs(gm, "inference") if s.kind == "conv"]
    assert len(found) == 1, [s.pattern for s in found]
    return found[0]


def _sync() -> None:
    if not SMOKE:
        torch.cuda.synchronize()


def time_ms(fn, iters: int) -> float:  # noqa: ANN001
    if SMOKE:
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters


def rel_err(got: list, ref: list) -> float:
    worst = 0.0
    for g, r in zip(got, ref, strict=True):
        scale = r.float().abs().max().item() or 1.0
        worst = max(worst, (g.float() - r.float()).abs().max().item() / scale)
    return worst


def candidates(sg) -> list:  # noqa: ANN001
    seed = lower(sg)
    return [seed, *seed_configs(seed)][:CANDIDATES]


def screen(specs: list, inputs: list, ref: list) -> list[dict]:
    """Each candidate built, checked against eager and timed briefly."""
    rows = []
    for spec in specs:
        row: dict = {"template": spec.template, "knobs": dict(spec.knobs)}
        try:
            kernel = build_kernel(spec)
            row["err"] = rel_err(kernel(*inputs), ref)
            _sync()
            row["ms"] = min(time_ms(lambda k=kernel: k(*inputs), 10) for _ in range(3))
            row["run"] = kernel
        except Exception as e:  # noqa: BLE001 - a candidate that fails is a row, not a stop
            row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
        rows.append(row)
    return rows


def kernelpro_compiled(module, inputs: list):  # noqa: ANN001, ANN201
    cache = tempfile.mkdtemp(prefix="kp-conv-sweep-")
    options = {"search": "on-miss", "budget_s": 10, "max_trials": 12, "cache_dir": cache}
    compiled = torch.compile(module, backend=kernelpro, options=options)
    compiled(*inputs)  # the search runs here
    return compiled


def rounds(methods: dict, rounds_n: int = 7) -> dict[str, float]:
    """Median ms of each method over interleaved rounds of ~5 ms of launches each."""
    iters = {}
    for name, fn in methods.items():
        fn()
        _sync()
        iters[name] = 1 if SMOKE else max(3, min(200, int(5.0 / max(time_ms(fn, 3), 1e-3))))
    samples: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(2 if SMOKE else rounds_n):
        for name, fn in methods.items():
            samples[name].append(time_ms(fn, iters[name]))
    return {name: round(statistics.median(s), 4) for name, s in samples.items()}


def run_case(name: str, case: tuple, backward: bool) -> dict:
    fn, example = _tensors(case, backward)
    sg = conv_subgraph(fn, example)
    inputs = sg.make_inputs(0, DEV)
    module = sg.module()
    with torch.no_grad():
        ref = list(module(*inputs))
        rows = screen(candidates(sg), inputs, ref)
    good = [r for r in rows if "ms" in r and r["err"] < (3e-2 if case[8] is BF16 else 1e-2)]
    result: dict = {"pattern": sg.pattern, "precision": sg.precision, "candidates": rows}
    methods = {"eager": lambda: module(*inputs)}
    if not SMOKE:
        inductor = torch.compile(module)
        with torch.no_grad():
            result["inductor_err"] = rel_err(list(inductor(*inputs)), ref)
        methods["inductor"] = lambda: inductor(*inputs)
    if rows and "run" in rows[0]:
        methods["kp_seed"] = lambda: rows[0]["run"](*inputs)
    if good:
        best = min(good, key=lambda r: r["ms"])
        result["best"] = {"template": best["template"], "knobs": best["knobs"], "err": best["err"]}
        methods["kp_best"] = lambda: best["run"](*inputs)
    search = not SMOKE and os.environ.get("PROBE_SEARCH", "1") == "1"
    if search and time.monotonic() - START < SEARCH_UNTIL_S:
        try:
            e2e = kernelpro_compiled(module, inputs)
            with torch.no_grad():
                result["kp_search_err"] = rel_err(list(e2e(*inputs)), ref)
            methods["kp_search"] = lambda: e2e(*inputs)
        except Exception as e:  # noqa: BLE001
            result["kp_search_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    with torch.no_grad():
        result["ms"] = rounds(methods)
    for r in rows:
        r.pop("run", None)
    return result


def main() -> None:
    out: dict = {
        "device": "cpu (interpreter smoke)" if SMOKE else torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "cases": {},
    }
    for name, case in CASES.items():
        for backward in (False, True) if case[-1] else (False,):
            key = f"{name}{'_bwd' if backward else ''}"
            try:
                out["cases"][key] = run_case(name, case, backward)
            except Exception as e:  # noqa: BLE001 - one case failing leaves the others
                out["cases"][key] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            print(key, json.dumps(out["cases"][key].get("ms", out["cases"][key])), flush=True)
    out["elapsed_s"] = round(time.monotonic() - START, 1)
    with open(os.path.join(os.environ.get("OUT", "."), "conv_sweep.json"), "w") as f:
        json.dump(out, f, indent=1, default=str)
    cols = ["eager", "inductor", "kp_seed", "kp_best", "kp_search"]
    print(f"\n{'case':34s}" + "".join(f"{c:>11s}" for c in cols) + "  best/ind  best template")
    for key, res in out["cases"].items():
        ms = res.get("ms", {})
        cells = "".join(f"{ms[c]:11.4f}" if c in ms else f"{'-':>11s}" for c in cols)
        ratio = ms.get("inductor", 0) / ms["kp_best"] if ms.get("kp_best") else 0
        best = res.get("best", {})
        knobs = best.get("knobs", {})
        print(
            f"{key:34s}{cells}  {ratio:8.2f}  {best.get('template', res.get('error', '-'))} {knobs}"
        )


if __name__ == "__main__":
    main()
