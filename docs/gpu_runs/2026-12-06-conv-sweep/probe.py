"""Probe: are the Triton conv templates (codegen/templates/conv.py, conv_bwd.py) competitive?
Forward, dgrad and wgrad separately, at real training sizes, against cuDNN and Inductor.

Cases: ResNet-50's stage convs at batch 128 (3x3 at 56/28/14/7, the stride-2 3x3, a 1x1), fp32
NCHW under PyTorch's default conv policy (cudnn.allow_tf32: TF32) and bf16 channels-last;
ConvNeXt's 7x7 depthwise and MobileNetV2's depthwise 3x3 / pointwise 1x1 (bf16 channels-last).
Per case and direction ("fwd": conv2d without bias; "dgrad", "wgrad": aten.convolution_backward
with one gradient asked for), the conv subgraph the partitioner cuts from the traced function:
- eager: that subgraph run by ATen (cuDNN, the process's default cudnn settings);
- inductor: torch.compile of it (default mode; PROBE_MAX_AUTOTUNE=1 adds max-autotune,
  forward only: it compiles a dozen Triton configs a conv);
- kp_default: the lowered spec at its default knobs; kp_best: the fastest correct one of the
  default, the default with PACK_W flipped and the first PROBE_TILES seed tiles.
Every candidate is checked against a float64 reference with the project's tolerances
(runtime/compare.compare: per-dtype rtol/atol plus twice eager's own error, so TF32 is allowed
what cuDNN's TF32 errs). Times: CUDA events around replays of a CUDA graph holding many
back-to-back calls (no Python or launch overhead in the figure), median of rounds, ms a call.
The run stops starting cases at PROBE_BUDGET_S (210 s) and lists what it skipped;
PROBE_CASES=a,b picks cases by name. JSON: $OUT/conv_sweep.json ({"case/dir": {"eager_ms",
"inductor_ms", "kernelpro_ms", ...}}) and $OUT/conv_sweep_meta.json; a table last.
PROBE_SMOKE=1: tiny shapes on the CPU under Triton's interpreter, to check the probe itself.
"""

from __future__ import annotations

import json
import os
import statistics
import time

SMOKE = os.environ.get("PROBE_SMOKE") == "1"
if SMOKE:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

if SMOKE:  # CPU convolutions are IEEE: so is the kernel then (its tf32 is checked on the GPU)
    torch.backends.cudnn.allow_tf32 = False
import torch.nn.functional as F  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from kernelpro_backend.codegen import seed_configs  # noqa: E402
from kernelpro_backend.fx_passes import find_subgraphs  # noqa: E402
from kernelpro_backend.lowering import lower  # noqa: E402
from kernelpro_backend.runtime.compare import compare  # noqa: E402
from kernelpro_backend.runtime.spec_kernel import build_kernel  # noqa: E402

DEV = "cpu" if SMOKE else "cuda"
START = time.monotonic()
BUDGET_S = float(os.environ.get("PROBE_BUDGET_S", "210"))
CASE_COST_S = 12.0  # about what one case-direction takes (compiles, reference, timing)
TILES = int(os.environ.get("PROBE_TILES", "2"))  # seed tiles screened beside the default
BF16, F32 = torch.bfloat16, torch.float32
ALL = ("fwd", "dgrad", "wgrad")

# name: (batch, C_in, C_out, H=W, kernel, stride, padding, groups, dtype, channels_last, dirs)
CASES = {
    "r50_s2_3x3_f32": (128, 128, 128, 28, 3, 1, 1, 1, F32, False, ALL),
    "r50_s2_3x3_bf16": (128, 128, 128, 28, 3, 1, 1, 1, BF16, True, ALL),
    "r50_s1_3x3_bf16": (128, 64, 64, 56, 3, 1, 1, 1, BF16, True, ALL),
    "r50_s3_3x3_bf16": (128, 256, 256, 14, 3, 1, 1, 1, BF16, True, ALL),
    "r50_s4_3x3_bf16": (128, 512, 512, 7, 3, 1, 1, 1, BF16, True, ALL),
    "r50_s2_3x3_stride2_bf16": (128, 128, 128, 56, 3, 2, 1, 1, BF16, True, ALL),
    "r50_s1_1x1_reduce_bf16": (128, 256, 64, 56, 1, 1, 0, 1, BF16, True, ALL),
    "convnext_dw7x7_bf16": (128, 96, 96, 56, 7, 1, 3, 96, BF16, True, ("fwd",)),
    "mobilenet_dw3x3_bf16": (128, 144, 144, 56, 3, 1, 1, 144, BF16, True, ("fwd",)),
    "mobilenet_pw1x1_bf16": (128, 144, 24, 56, 1, 1, 0, 1, BF16, True, ALL),
    "r50_s3_3x3_f32": (128, 256, 256, 14, 3, 1, 1, 1, F32, False, ALL),
    "r50_s1_1x1_reduce_f32": (128, 256, 64, 56, 1, 1, 0, 1, F32, False, ALL),
}
if SMOKE:
    CASES = {
        "smoke_3x3_f32": (2, 8, 16, 9, 3, 2, 1, 1, F32, False, ALL),
        "smoke_dw_bf16": (2, 8, 8, 9, 3, 1, 1, 8, BF16, True, ("fwd",)),
    }
if os.environ.get("PROBE_CASES"):
    CASES = {k: CASES[k] for k in os.environ["PROBE_CASES"].split(",")}


def traced(case: tuple, direction: str):  # noqa: ANN201
    """The conv subgraph of one direction of a case, and its GEMM FLOPs."""
    n, cin, cout, hw, k, stride, pad, groups, dtype, cl, _ = case
    fmt = torch.channels_last if cl else torch.contiguous_format
    x = torch.randn(n, cin, hw, hw, dtype=dtype, device="meta").to(memory_format=fmt)
    w = torch.randn(cout, cin // groups, k, k, dtype=dtype, device="meta")
    w = w.to(memory_format=fmt)
    out = (hw + 2 * pad - k) // stride + 1
    dy = torch.randn(n, cout, out, out, dtype=dtype, device="meta").to(memory_format=fmt)
    flops = 2.0 * n * out * out * cout * (cin // groups) * k * k
    if direction == "fwd":

        def fn(x, w):  # noqa: ANN001, ANN202
            return (F.conv2d(x, w, stride=stride, padding=pad, groups=groups),)

        args: tuple = (x, w)
    else:
        mask = [direction == "dgrad", direction == "wgrad", False]

        def fn(dy, x, w):  # noqa: ANN001, ANN202
            grads = torch.ops.aten.convolution_backward(
                dy, x, w, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], groups, mask
            )
            return (grads[0] if direction == "dgrad" else grads[1],)

        args = (dy, x, w)
    gm = make_fx(fn, tracing_mode="fake")(*args)
    gm.graph.eliminate_dead_code()  # the gradients not asked for: getitems of None
    gm.recompile()
    found = [s for s in find_subgraphs(gm, "inference") if s.kind == "conv"]
    assert len(found) == 1, [s.pattern for s in found]
    return found[0], flops


def sync() -> None:
    if not SMOKE:
        torch.cuda.synchronize()


def _graph(fn, reps: int):  # noqa: ANN001, ANN202
    """A CUDA graph of `reps` back-to-back calls (outputs from the graph's own pool)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    return graph


def gpu_ms(fn, target_ms: float = 20.0, rounds: int = 5) -> tuple[float, str]:  # noqa: ANN001
    """(ms a call, how timed): graph replays of ~target_ms, median of rounds; plain
    back-to-back calls where the graph cannot be captured."""
    if SMOKE:
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3, "cpu"
    fn()
    sync()
    reps, how = 20, "graph"
    try:
        graph = _graph(fn, reps)
        run = graph.replay
    except Exception:  # noqa: BLE001 - capture refused: time the calls themselves
        graph, run, reps, how = None, fn, 1, "stream"
    sync()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    end.record()
    end.synchronize()
    per_run = max(start.elapsed_time(end), 1e-3)
    runs = max(1, min(2000, int(target_ms / per_run)))
    samples = []
    for _ in range(rounds):
        start.record()
        for _ in range(runs):
            run()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / (runs * reps))
    del graph
    return statistics.median(samples), how


def checked(outs: list, ref64: list, eager: list) -> tuple[float, str | None]:
    """(worst error / allowed over the outputs: <= 1 passes, the first rejection's message)."""
    worst, why = 0.0, None
    for i, (g, r, e) in enumerate(zip(outs, ref64, eager, strict=True)):
        rejection, ratio = compare(i, g, r, e)
        worst = max(worst, ratio)
        why = why or (rejection.message[:200] if rejection is not None else None)
    return worst, why


# wgrad tiles beside the default (WG_BLOCK_M, WG_BLOCK_N, WG_BLOCK_K, warps, stages)
WGRAD_TILES = ((128, 128, 32, 8, 3), (64, 128, 64, 4, 3), (128, 64, 64, 4, 4), (64, 64, 32, 4, 3))


def candidates(seed, direction: str) -> list:  # noqa: ANN001
    """The default, then (wgrad) other weight-gradient tiles, or the default with the weight
    repack flipped and the template's first seed tiles."""
    out = [seed]
    if direction == "wgrad":
        for m, n, k, warps, stages in WGRAD_TILES:
            knobs = dict(WG_BLOCK_M=m, WG_BLOCK_N=n, WG_BLOCK_K=k, num_warps=warps)
            try:
                spec = seed.with_knobs(**knobs, num_stages=stages)
            except Exception:  # noqa: BLE001 - illegal at this size
                continue
            if spec.knobs != seed.knobs and len(out) <= TILES:
                out.append(spec)
        return out
    if "PACK_W" in dict(seed.knobs):
        out.append(seed.with_knobs(PACK_W=1 - int(seed.knob("PACK_W"))))
    return out + seed_configs(seed)[:TILES]


def screen(specs: list, inputs: list, ref64: list, eager: list) -> list[dict]:
    """Each candidate built, checked and timed briefly; a failure is a row, not a stop."""
    rows = []
    for i, spec in enumerate(specs):
        if i and time.monotonic() - START > BUDGET_S:
            break
        row: dict = {"knobs": dict(spec.knobs)}
        try:
            kernel = build_kernel(spec)
            t = time.monotonic()
            with torch.no_grad():
                row["err_ratio"], row["rejected"] = checked(list(kernel(*inputs)), ref64, eager)
            row["compile_s"] = round(time.monotonic() - t, 1)
            row["ms"] = round(gpu_ms(lambda k=kernel: k(*inputs), 5.0, 3)[0], 5)
            row["run"] = kernel
        except Exception as e:  # noqa: BLE001
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        rows.append(row)
    return rows


def inductor_rows(module, inputs: list, ref64: list, eager: list, direction: str) -> dict:  # noqa: ANN001
    out: dict = {}
    modes = [("inductor", {})]
    if os.environ.get("PROBE_MAX_AUTOTUNE") == "1" and direction == "fwd":
        modes.append(("inductor_max_autotune", {"mode": "max-autotune-no-cudagraphs"}))
    for name, kw in modes:
        try:
            torch._dynamo.reset()
            t = time.monotonic()
            compiled = torch.compile(module, dynamic=False, **kw)
            with torch.no_grad():
                out[f"{name}_err_ratio"] = checked(list(compiled(*inputs)), ref64, eager)[0]
            out[f"{name}_compile_s"] = round(time.monotonic() - t, 1)
            with torch.no_grad():
                out[f"{name}_ms"] = round(gpu_ms(lambda c=compiled: c(*inputs))[0], 5)
        except Exception as e:  # noqa: BLE001
            out[f"{name}_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    return out


def run_case(case: tuple, direction: str) -> dict:
    sg, flops = traced(case, direction)
    inputs = sg.make_inputs(0, DEV)
    module = sg.module()
    with torch.no_grad():
        eager = list(module(*inputs))
        ref64 = list(module(*[t.double() for t in inputs]))
    res: dict = {"pattern": sg.pattern, "precision": sg.precision, "gflop": flops / 1e9}
    with torch.no_grad():
        res["eager_ms"], res["timing"] = gpu_ms(lambda: module(*inputs))
    res["eager_ms"] = round(res["eager_ms"], 5)
    if not SMOKE:
        res.update(inductor_rows(module, inputs, ref64, eager, direction))
    try:
        seed = lower(sg)
    except Exception as e:  # noqa: BLE001 - no template for it (depthwise backward, ...)
        res["kernelpro_error"] = f"{type(e).__name__}: {str(e)[:300]}"
        return res
    res["template"] = seed.template
    rows = screen(candidates(seed, direction), inputs, ref64, eager)
    good = [r for r in rows if not r.get("rejected") and "ms" in r]
    if rows and rows[0] in good:
        with torch.no_grad():
            res["kernelpro_default_ms"] = round(gpu_ms(lambda: rows[0]["run"](*inputs))[0], 5)
    if good:
        best = min(good, key=lambda r: r["ms"])
        with torch.no_grad():
            res["kernelpro_ms"] = round(gpu_ms(lambda: best["run"](*inputs))[0], 5)
        res["kernelpro_knobs"] = best["knobs"]
        res["kernelpro_tflops"] = round(flops / res["kernelpro_ms"] / 1e9, 1)
    res["eager_tflops"] = round(flops / res["eager_ms"] / 1e9, 1)
    for r in rows:
        r.pop("run", None)
    res["candidates"] = rows
    return res


def table(results: dict) -> None:
    cols = ("eager_ms", "inductor_ms", "kernelpro_default_ms", "kernelpro_ms")
    print(f"\n{'case/dir':34s}{'eager':>9s}{'ind':>9s}{'kp_def':>9s}{'kp_best':>9s}", end="")
    print(f"{'ind/kp':>8s}{'eag/kp':>8s}  kp knobs (or error)")
    for key, r in results.items():
        cells = "".join(f"{r[c]:9.4f}" if c in r else f"{'-':>9s}" for c in cols)
        kp = r.get("kernelpro_ms")
        ratios = "".join(
            f"{r[c] / kp:8.2f}" if kp and c in r else f"{'-':>8s}"
            for c in ("inductor_ms", "eager_ms")
        )
        knobs = r.get("kernelpro_knobs")
        wg = key.endswith("wgrad")
        short = (
            " ".join(
                f"{k.removeprefix('WG_BLOCK_').removeprefix('BLOCK_')}={v}"
                for k, v in knobs.items()
                if k != "GROUP_M" and (k.startswith(("WG_", "SPLIT")) == wg or "num_" in k)
            )
            if knobs
            else (r.get("kernelpro_error") or r.get("error") or "no correct candidate")[:60]
        )
        print(f"{key:34s}{cells}{ratios}  {short}")


def main() -> None:
    meta: dict = {
        "device": "cpu (interpreter smoke)" if SMOKE else torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "budget_s": BUDGET_S,
        "skipped": [],
    }
    results: dict = {}
    out_dir = os.environ.get("OUT", ".")
    for name, case in CASES.items():
        for direction in case[-1]:
            key = f"{name}/{direction}"
            if time.monotonic() - START > BUDGET_S - CASE_COST_S:
                meta["skipped"].append(key)
                continue
            t = time.monotonic()
            try:
                results[key] = run_case(case, direction)
            except Exception as e:  # noqa: BLE001 - one case failing leaves the others
                results[key] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            results[key]["case_s"] = round(time.monotonic() - t, 1)
            if not SMOKE:
                torch.cuda.empty_cache()
            short = {k: v for k, v in results[key].items() if k.endswith("_ms") or k == "error"}
            print(key, json.dumps(short), flush=True)
            with open(os.path.join(out_dir, "conv_sweep.json"), "w") as f:
                json.dump(results, f, indent=1, default=str)  # after each case: a cut run keeps it
    meta["elapsed_s"] = round(time.monotonic() - START, 1)
    with open(os.path.join(out_dir, "conv_sweep_meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    if meta["skipped"]:
        print(f"\nSKIPPED (budget {BUDGET_S:.0f} s reached): {', '.join(meta['skipped'])}")
    print(f"{meta['device']}, torch {meta['torch']}, cudnn.allow_tf32={meta['cudnn_allow_tf32']}")
    table(results)


if __name__ == "__main__":
    main()
