"""The codegen GEMM template against cuBLAS and Inductor on real subgraphs, over its default
knobs and Inductor's H100 tile configurations, all timed in one run.

    OUT=/tmp/out python -m kernelpro_backend.cli.sweeps gemm-sweep [--budget-s 210] [--max-configs 14]
    python -m kernelpro_backend.cli.sweeps gemm-sweep --cpu-smoke   # tiny sizes, Triton interpreter

Each case compiles a small nn.Module through the kernelpro backend (fallback eager, search off)
and takes its GEMM subgraph. Every configuration is built, checked against the float64
reference with runtime/compare.py's tolerance (under the subgraph's precision policy, so tf32
is judged like PyTorch's own tf32), then timed with triton.testing.do_bench (median ms) next to
cuBLAS (torch.mm on the same operand views: the GEMM alone, no epilogue) and Inductor (the same
subgraph module under torch.compile, default mode: cuBLAS plus a fused epilogue kernel).
Ratios are times: ours/cuBLAS <= 1.10 is the goal for bf16/fp16 and tf32.
Results: $OUT/gpu_gemm_sweep.json; the table is printed last. A configuration that fails to
compile or is wrong is a row with its error, never a crash; configurations past the time
budget are listed as skipped.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from ..codegen import IllegalSpec, KernelSpec, alternatives, build
from ..codegen.gemm_configs import fitted_knobs, operand_kind, split_k_config
from ..codegen.templates.library import library_epilogue
from ..explain import find_subgraphs
from ..fx_passes import Subgraph
from ..lowering import lower
from ..runtime.compare import compare, max_abs_error
from ..runtime.precision import precision_mode
from ..runtime.timing import time_kernel
from ..runtime.validate import compute_reference
from . import gemm_cases, gemm_table
from .gemm_cases import Case

DEVICE = "cuda"
# (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps), most promising first: Inductor's H100
# mm_configs / persistent_mm_configs for large GEMMs (template_heuristics/triton.py).
SWEEP_16BIT = (
    (128, 256, 64, 3, 8), (128, 256, 64, 4, 8), (128, 128, 64, 4, 8), (128, 128, 64, 3, 8),
    (128, 128, 64, 5, 8), (128, 128, 64, 3, 4), (256, 128, 64, 4, 8), (128, 128, 128, 3, 8),
    (128, 128, 128, 4, 8), (64, 128, 64, 3, 4), (128, 128, 32, 3, 4), (64, 128, 128, 4, 4),
)  # fmt: skip
SWEEP_TF32 = (
    (128, 256, 32, 3, 8), (128, 128, 32, 4, 8), (128, 128, 32, 3, 8), (128, 128, 64, 3, 8),
    (128, 128, 64, 3, 4), (256, 128, 32, 3, 8), (128, 64, 32, 4, 8), (64, 128, 32, 4, 4),
    (128, 128, 32, 2, 8), (64, 128, 64, 3, 4), (128, 256, 32, 4, 8), (64, 64, 64, 3, 8),
)  # fmt: skip


def gemm_subgraph(model: nn.Module, inputs: tuple, precision: str) -> Subgraph:
    torch._dynamo.reset()
    found = find_subgraphs(model, *inputs, train=False, backend_options={"precision": precision})
    gemms = [s for s in found if s.kind == "gemm"]
    if not gemms:
        raise RuntimeError(f"no GEMM subgraph among {[s.pattern for s in found]}")
    return gemms[0]


def label(knobs: dict, spec: KernelSpec | None = None) -> str:
    if spec is not None and spec.template == "gemm_library":
        return f"library {library_epilogue(spec)}"
    text = (
        f"{knobs['BLOCK_M']}x{knobs['BLOCK_N']}x{knobs['BLOCK_K']} "
        f"s{knobs['num_stages']} w{knobs['num_warps']} g{knobs['GROUP_M']}"
    )
    extras = [knobs.get("LOADS", "pointer")] + (["persistent"] if knobs["PERSISTENT"] else [])
    extras += ["flat"] if knobs.get("FLATTEN") else []
    extras += [f"{knobs['SM_PROGRAMS']}/SM"] if knobs.get("SM_PROGRAMS", 1) > 1 else []
    extras += (
        [f"epilogue/{knobs['EPILOGUE_SUBTILE']}"] if knobs.get("EPILOGUE_SUBTILE", 1) > 1 else []
    )
    extras += [f"split-K {knobs['SPLIT_K']}"] if knobs.get("SPLIT_K", 1) > 1 else []
    return text + " " + "+".join(extras)


def configs(
    spec: KernelSpec, limit: int, extra: Sequence[dict] = ()
) -> list[tuple[str, dict, KernelSpec]]:
    """(kind, knobs, spec): the default, its split-K form where its tiles leave most SMs idle
    (gemm_configs.split_k_config), its sliced-epilogue, flattened-persistent, TMA and persistent
    variants, the sweep tiles, the seed's library alternatives (codegen/templates/library.py; no
    knobs). `extra`: knob changes over the default, timed first."""
    default = dict(spec.knobs)
    found: list[tuple[str, dict, KernelSpec]] = [("default", default, spec)]
    tma, persistent = dict(LOADS="tma"), dict(PERSISTENT=True)
    flat = dict(PERSISTENT=True, FLATTEN=True)
    split = split_k_config(spec, default)
    variants = [
        *(dict(default, **e) for e in extra),
        *([split] if split is not None else []),
        dict(default, EPILOGUE_SUBTILE=2),
        dict(default, EPILOGUE_SUBTILE=4),
        dict(default, **flat),
        dict(default, **flat, **tma),
        dict(default, **flat, EPILOGUE_SUBTILE=2),
        dict(default, **flat, **tma, EPILOGUE_SUBTILE=2),
        dict(default, **tma),
        dict(default, **persistent),
        dict(default, **tma, **persistent),
    ]
    tiles = [
        fitted_knobs(spec, t)
        for t in (SWEEP_16BIT if operand_kind(spec) == "16bit" else SWEEP_TF32)
    ]
    variants += tiles[:5] + [dict(t, **tma) for t in tiles[1:3]] + tiles[5:]
    for knobs in variants:
        if len(found) >= limit:
            break
        if any(knobs == k for _, k, _ in found):
            continue
        try:
            found.append(("candidate", knobs, spec.with_knobs(**knobs)))
        except IllegalSpec as e:
            print(f"  skip {label(knobs)}: {e}", flush=True)
    found += [("library", {}, alt) for alt in alternatives(spec) if alt.template == "gemm_library"]
    return found


def bench(fn: Callable[[], object]) -> float:
    """Median ms of `fn` by the one kernel timer. Under --cpu-smoke one run shows the path works
    and the time is NaN: the interpreter's times mean nothing."""
    if DEVICE == "cpu":
        fn()
        return float("nan")
    return time_kernel(lambda: fn(), [()], torch.device(DEVICE)).median_ms


def operand_views(spec: KernelSpec, inputs: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """A and B exactly as the kernel reads them (offset and strides from the spec)."""
    views = []
    batch, m, n, k = (spec.param(x) for x in ("batch", "m", "n", "k"))
    for name, shape in (("a", (m, k)), ("b", (k, n))):
        index, offset, strides = spec.param(name)
        x = inputs[index]
        size, stride = ((batch, *shape), strides) if len(spec.domain) == 3 else (shape, strides[1:])
        views.append(x.as_strided(size, stride, x.storage_offset() + offset))
    return tuple(views)


IEEE_CONFIGS = 2  # IEEE float32 runs on FMA units (~0.4x cuBLAS): the default and one more


def _baselines(case: dict, sg: Subgraph, spec: KernelSpec, inputs: list, autotune: bool) -> None:
    """cuBLAS (the GEMM alone on the kernel's operand views), eager (the whole subgraph as
    ATen ops, the search's eager baseline), Inductor (default mode: cuBLAS plus its epilogue
    kernel) and, with `autotune`, max-autotune; all under the spec's policy (IEEE float32 for
    ieee and tf32x3)."""
    a, b = operand_views(spec, inputs)
    mm = torch.bmm if a.dim() == 3 else torch.mm
    case["cublas_ms"] = bench(lambda: mm(a, b))
    case["eager_ms"] = bench(functools.partial(sg.module(), *inputs))
    if DEVICE != "cuda":
        return
    modes: list[tuple[str, str | None]] = [("inductor", None)]
    if autotune:
        modes.append(("max_autotune", "max-autotune-no-cudagraphs"))
    for name, mode in modes:
        try:
            t0 = time.time()
            torch._dynamo.reset()
            compiled = torch.compile(sg.module(), mode=mode)
            compiled(*inputs)
            case[f"{name}_compile_s"] = round(time.time() - t0, 1)
            case[f"{name}_ms"] = bench(functools.partial(compiled, *inputs))
        except Exception as e:
            case[f"{name}_error"] = f"{type(e).__name__}: {str(e)[:300]}"


def _checked(outs: Sequence[torch.Tensor], ref: Any) -> tuple[str | None, float]:
    """("wrong: ..." for the first output the reference rejects, or None; the worst error as a
    fraction of the allowed one)."""
    worst = 0.0
    for i, got in enumerate(outs):
        eager = ref.eager[i] if ref.eager is not None else None
        rejection, ratio = compare(i, got, ref.exact[i], eager)
        if rejection is not None:
            return f"wrong: {rejection.message}", ratio
        worst = max(worst, ratio)
    return None, worst


def _config_row(row: dict, spec: KernelSpec, inputs: list, ref: object) -> None:
    t0 = time.time()
    kernel = build(spec)
    with precision_mode(spec.precision):
        outs = kernel(*inputs)
        if DEVICE == "cuda":
            torch.cuda.synchronize()
    row["build_s"] = round(time.time() - t0, 2)
    wrong, worst = _checked(outs, ref)
    if wrong:
        raise AssertionError(wrong)
    row["error_ratio"] = round(worst, 4)  # worst error / allowed error
    # against float64: this kernel's largest error, and PyTorch eager's under the spec's policy
    # (IEEE float32 for ieee and tf32x3) on the same inputs
    exact = ref.exact  # type: ignore[attr-defined]
    row["max_abs_error"] = max(max_abs_error(o, r) for o, r in zip(outs, exact, strict=True))
    if ref.eager is not None:  # type: ignore[attr-defined]
        row["eager_max_abs_error"] = max(
            max_abs_error(e, r)
            for e, r in zip(ref.eager, exact, strict=True)  # type: ignore[attr-defined]
        )
    row["ms"] = bench(functools.partial(kernel, *inputs))


def _search(sg: Subgraph, seconds: float, root: str) -> tuple[dict, Any]:
    """The subgraph searched for `seconds` (the built-in proposer, default workers) into the
    sweep's own cache, empty at its start: the search's own side-by-side figures (its
    baselines, its best candidate). One cache for the whole sweep, as one for a user's run:
    its searches lease one worker pool (started once, not per case) and share the CUTLASS
    libraries, built once per epilogue and dtype for every shape, and the search memory of
    earlier cases' moves. Each case's subgraph is its own key: no case finds another's entry."""
    from ..options import Options
    from ..tuner.searcher import SubgraphSearcher
    from .search_report import summarize_logs

    cache = os.path.join(root, "search-cache")
    searcher = SubgraphSearcher(Options(cache_dir=cache, budget_s=seconds, progress=False))
    t0 = time.time()
    artifact = searcher(sg)
    rows = summarize_logs(sorted(Path(cache, "logs").glob(f"{sg.key.digest[:16]}*.jsonl")))
    found: dict = {"wall_s": round(time.time() - t0, 1), "skipped": searcher.skipped}
    if rows:
        r = rows[-1]
        found.update({k: r[k] for k in ("trials", "stop_reason", "eager_ms", "inductor_ms",
                                        "best_candidate_ms", "kept_kernel")})  # fmt: skip
    if artifact is not None:
        found["winner_ms"] = artifact.kernel_ms
    return found, artifact


def _kept_row(sg: Subgraph, spec: KernelSpec, artifact: Any) -> dict:
    """The kept kernel as a cache hit runs it (load_artifact), checked against the reference on
    fresh inputs and timed by this sweep's own timer: its figure stands beside the sweep's
    cuBLAS, eager and Inductor columns, one method for all (the search's figures are its own,
    timed against its own baselines). An eager win (tuner/eager.py: cuBLAS's call beat the
    Inductor fallback) runs the subgraph's own ATen ops, as a hit on it does."""
    from ..tuner.artifacts import load_artifact
    from ..tuner.eager import eager_kernel, is_eager

    inputs = sg.make_inputs(2, DEVICE)
    kernel = eager_kernel(sg) if is_eager(artifact) else load_artifact(artifact)
    with precision_mode(spec.precision):
        ref = compute_reference(sg.module(), inputs)
        wrong, _ = _checked(kernel(*inputs), ref)
        if wrong:
            return {"kept_error": wrong}
        return {"kept_ms": bench(functools.partial(kernel, *inputs))}


def run_case(
    case_def: Case,
    budget_end: float,
    limit: int,
    autotune: bool,
    search_s: float,
    ceilings: Any,
    extra: Sequence[dict] = (),
) -> dict:
    torch.set_float32_matmul_precision(case_def.torch_precision)
    model, inputs_ = case_def.make()
    sg = gemm_subgraph(model, inputs_, case_def.precision)
    del model, inputs_
    spec = lower(sg)
    m, n, k, batch = (spec.param(v) for v in ("m", "n", "k", "batch"))
    flop = 2.0 * m * n * k * batch
    case: dict = {"case": case_def.name, "group": case_def.group, "pattern": sg.pattern,
                  "precision": spec.precision, "mnk": [m, n, k, batch]}  # fmt: skip
    case["inputs"] = [[list(s), list(st), dt] for s, st, dt in sg.input_meta]
    inputs = sg.make_inputs(1, DEVICE)
    with precision_mode(spec.precision):
        ref = compute_reference(sg.module(), inputs)
        _baselines(case, sg, spec, inputs, autotune)
    if operand_kind(spec) == "ieee":
        limit = min(limit, IEEE_CONFIGS)
    rows = []
    for kind, knobs, config in configs(spec, limit, extra):
        row: dict = {"config": label(knobs, config), "kind": kind, "knobs": knobs}
        rows.append(row)
        if time.time() > budget_end:
            row["status"] = "skipped (time budget)"
            continue
        try:
            _config_row(row, config, inputs, ref)
            row["tflops"] = round(flop / (row["ms"] * 1e-3) / 1e12, 1)
            row["vs_cublas"] = round(row["ms"] / case["cublas_ms"], 3)
            if "inductor_ms" in case:
                row["vs_inductor"] = round(row["ms"] / case["inductor_ms"], 3)
            row["status"] = "ok"
        except Exception as e:  # a config that fails is a result, the others still run
            row["status"] = f"error: {type(e).__name__}: {str(e)[:400]}"
            traceback.print_exc(limit=2)
        print(f"  {row['config']:38} {row['status'][:60]} {row.get('ms', '')}", flush=True)
    case["configs"] = rows
    del ref, inputs
    if search_s > 0 and DEVICE == "cuda" and time.time() < budget_end:
        try:
            case["search"], artifact = _search(sg, search_s, os.environ.get("OUT", "."))
            if artifact is not None:
                case["search"].update(_kept_row(sg, spec, artifact))
        except Exception as e:
            case["search"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    for base in ("cublas", "eager", "inductor", "max_autotune"):
        if f"{base}_ms" in case:
            case[f"{base}_tflops"] = round(flop / (case[f"{base}_ms"] * 1e-3) / 1e12, 1)
    case["roof_tflops"] = None
    if ceilings is not None:  # the roof of the operands' dtype under the spec's policy
        operand = str(spec.param("operand_dtype"))
        roof = ceilings.peak_flops_per_s(operand, spec.precision, True)
        case["roof_tflops"] = round(roof / 1e12, 1)
    return case


def sweep(
    budget_s: float = 600.0,
    max_configs: int = 8,
    cpu_smoke: bool = False,
    only: Sequence[str] = (),
    groups: Sequence[str] = (),
    problems: str | None = None,
    autotune: Sequence[str] = (),
    search_s: float = 0.0,
    search_only: Sequence[str] = (),
    extra: Sequence[dict] = (),
) -> int:
    """Run the sweep (cli/sweeps.py parses its arguments) and write
    $OUT/gpu_gemm_sweep.json; returns the exit code. `only`/`groups` select cases by name or
    group (a case either selects runs); `autotune` and `search_only` name (substrings of) the
    cases that also get max-autotune and a `search_s` search ("all" for every case); `extra`:
    knob changes over each case's default configuration, timed first (legal ones)."""
    global DEVICE
    out_dir = os.environ.get("OUT", ".")
    stale = os.path.join(out_dir, "search-cache")
    if search_only and os.path.isdir(stale) and os.listdir(stale):
        print(f"gpu_gemm_sweep: {stale} holds an earlier sweep's searches, which this run "
              "would report as its own; use a fresh OUT", file=sys.stderr)  # fmt: skip
        return 2
    if cpu_smoke:
        DEVICE = gemm_cases.DEVICE = "cpu"
        os.environ["TRITON_INTERPRET"] = "1"
        max_configs = min(max_configs, 3)
    elif not torch.cuda.is_available():
        print("gpu_gemm_sweep: no CUDA GPU here; run it on the device machine", file=sys.stderr)
        return 2
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    os.makedirs(out_dir, exist_ok=True)
    ceilings = None
    if DEVICE == "cuda":
        from ..profilers.ceilings import Ceilings

        ceilings = Ceilings.load_or_measure("cuda", os.path.join(out_dir, "ceilings"))
    start = time.time()
    budget_end = start + budget_s
    results: list[dict] = []
    meta = {
        "device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (interpreter)",
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }

    def picked(c: Case, names: Sequence[str]) -> bool:
        return "all" in names or any(o in c.name for o in names)

    for c in gemm_cases.cases(cpu_smoke, problems):
        if (only or groups) and not (picked(c, only) or c.group in groups):
            continue
        if time.time() > budget_end:
            results.append({"case": c.name, "group": c.group, "error": "skipped (time budget)"})
            continue
        print(f"{c.name} ({time.time() - start:.0f} s)", flush=True)
        try:
            results.append(run_case(c, budget_end, max_configs, picked(c, autotune),
                                    search_s if picked(c, search_only) else 0.0,
                                    ceilings, extra))  # fmt: skip
        except Exception as e:
            traceback.print_exc()
            results.append({"case": c.name, "group": c.group,
                            "error": f"{type(e).__name__}: {str(e)[:400]}"})  # fmt: skip
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
        meta["wall_s"] = round(time.time() - start, 1)
        with open(os.path.join(out_dir, "gpu_gemm_sweep.json"), "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1, default=str)
    torch.set_float32_matmul_precision("highest")
    print(gemm_table.table(meta, results))
    return 0 if all("error" not in c for c in results) else 1
