"""The row family over row length: eager, Inductor and kernelpro's row candidates, one run.

    OUT=/tmp/out python -m kernelpro_backend.cli.sweeps row-sweep [--budget-s 300] [--only softmax]

Each case compiles a small module (softmax, log-softmax, LayerNorm, RMSNorm, cross-entropy;
forward, or forward and backward) through the kernelpro backend (fallback eager, search off)
and takes its largest row subgraph of the chosen graph. Its candidates are the lowered Triton
seed and the row-resident CUDA kernel (codegen/templates/cluster.py) at every legal cluster size and
warp count at the widest vector: every one is built, checked against the subgraph's reference
(runtime/compare.py's tolerance) and timed (median ms) beside eager (the subgraph module) and
Inductor (torch.compile of it); one whose warm-up runs take 1.5x the best time so far keeps
those runs' median, marked "abandoned". With `SweepSpace(clusters="ring")` the row-resident
candidates are the default alternative and its one-knob neighbours (what a search measures
first), a seventh of the whole space's compile and timing cost; `seed_knobs` adds named seed
variants. Effective bandwidth is the minimal bytes (each input and output once) over the time;
the DRAM roof is measured in the same run by a device-to-device copy.
"kernelpro" here is the best candidate of this sweep of the space, not a search's pick: a
search measures the same candidates and keeps the fastest.
With `autotune`, Inductor's max-autotune (no CUDA graphs) is timed beside its default.
"shipped" is what the backend runs for the subgraph: the best kernel where it beats both
baselines, else the faster of Inductor (the fallback) and eager ATen (a candidate of every
search). Results: $OUT/gpu_row_sweep.json, the table printed last.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import itertools
import json
import logging
import os
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..codegen import IllegalSpec, KernelSpec, alternatives, knob_space, render
from ..examples import RMSNorm
from ..explain import find_subgraphs
from ..lowering import lower
from ..runtime.compare import compare
from ..runtime.spec_kernel import build_kernel
from ..runtime.timing import time_kernel
from ..runtime.validate import compute_reference
from ..search.rules import neighbour_values

# (rows, cols): about 1 GiB of float32 input each, the last at 4 GiB
SIZES = ((65536, 4096), (16384, 16384), (4096, 65536), (1024, 262144))
# The sweep, row length 256 ... 512k: 1 GiB of float32 input at each length
FULL_SIZES = tuple((2**28 // c, c) for c in (256, 1024, 4096, 16384, 65536, 262144, 524288))


_HOLD_TAG = {"registers": "", "shared": " smem", "split": " split"}  # in candidate names


def selected(name: str, only: tuple[str, ...]) -> bool:
    """Whether a case name ("softmax fwd torch.float32 4096x65536") matches one of `only`: a
    substring starting a word (after a space or "torch."), so "softmax fwd" is not also
    log_softmax's and "bfloat16" picks the bf16 cases."""
    return any(name.startswith(o) or f" {o}" in name or f".{o}" in name for o in only)


class _Op(nn.Module):
    def __init__(self, op: str, n: int) -> None:
        super().__init__()
        self.op = op
        self.norm = nn.LayerNorm(n) if op == "layer_norm" else RMSNorm(n)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        if self.op == "softmax":
            return x.softmax(-1)
        if self.op == "log_softmax":
            return x.log_softmax(-1)
        if self.op == "cross_entropy":
            return F.cross_entropy(x, t)
        return self.norm(x)


def row_subgraph(op: str, rows: int, cols: int, dtype: torch.dtype, backward: bool):
    torch._dynamo.reset()
    model = _Op(op, cols).cuda().to(dtype)
    x = torch.randn(rows, cols, device="cuda", dtype=dtype, requires_grad=backward)
    t = torch.randint(0, cols, (rows,), device="cuda")
    found = find_subgraphs(model, x, t, train=backward)
    graph = "backward" if backward else "forward"
    rows_sgs = [s for s in found if s.kind != "gemm" and s.graph.startswith(graph)] or found
    return max(rows_sgs, key=lambda s: sum(torch.Size(m[0]).numel() for m in s.input_meta))


def minimal_bytes(spec: KernelSpec) -> int:
    total = 0
    for shape, stride, dt in (*spec.inputs, *spec.outputs):
        size = 4 if dt in ("float32", "int32") else 8 if dt == "int64" else 1 if dt == "bool" else 2
        span = 1 + sum((s - 1) * st for s, st in zip(shape, stride, strict=True) if s > 0)
        total += span * size
    return total


def neighbours(seed: KernelSpec, label=None) -> list[tuple[str, KernelSpec]]:  # type: ignore[no-untyped-def]
    """The seed with one knob moved as the search's neighbour moves move it (a number one legal
    step up or down, a string to each other value): the first ring a search explores."""
    out = []
    for name, values in sorted(knob_space(seed).items()):
        for value in neighbour_values(values, seed.knob(name)):
            try:
                spec = seed.with_knobs(**{name: value})
            except IllegalSpec:
                continue
            out.append((label(spec) if label else f"seed {name}={value}", spec))
    return out


def cluster_name(spec: KernelSpec) -> str:
    """ "cluster c8 w16 v4 pair split": the row-resident kernel's knobs in a candidate's name."""
    tag = (" pair" if spec.knob("ONLINE") == "pair" else "") + _HOLD_TAG[str(spec.knob("HOLD"))]
    return f"cluster c{spec.knob('CLUSTER')} w{spec.knob('num_warps')} v{spec.knob('VEC')}{tag}"


@dataclasses.dataclass(frozen=True)
class SweepSpace:
    """Which candidates a case measures beside the Triton seed. `seed_ring`: the seed's
    one-knob neighbours; `clusters`: every legal row-resident configuration ("all"), the
    default alternative and its one-knob neighbours ("ring"), or no alternative ("none": the
    Triton seed and its variants alone); `seed_knobs`: seed variants
    named by knob values (e.g. {"num_warps": 32}), illegal ones skipped."""

    seed_ring: bool = False
    clusters: str = "all"
    seed_knobs: tuple[tuple[tuple[str, Any], ...], ...] = ()


def candidates(seed: KernelSpec, space: SweepSpace = SweepSpace()) -> list[tuple[str, KernelSpec]]:
    """The seed, its variants the space names, and row-resident cluster configurations."""
    out = [("triton seed", seed), *(neighbours(seed) if space.seed_ring else [])]
    for knobs in space.seed_knobs:
        try:
            out.append(
                ("seed " + " ".join(f"{k}={v}" for k, v in knobs), seed.with_knobs(**dict(knobs)))
            )
        except IllegalSpec:
            continue
    for alt in alternatives(seed) if space.clusters != "none" else ():
        if alt.template == "row_split":  # few long rows: the default and its ring
            name = f"split s{alt.knob('SPLIT')} b{alt.knob('BLOCK_C')} w{alt.knob('num_warps')}"
            out += [(name, alt), *neighbours(alt, lambda s: f"split {dict(s.knobs)}")]
            continue
        if space.clusters == "ring":
            out += [(cluster_name(alt) + " (default)", alt), *neighbours(alt, cluster_name)]
            continue
        legal = knob_space(alt)
        for cluster in (1, 2, 4, 8, 16):  # the registers' legal sizes and smaller held in smem
            for warps in (4, 8, 16, 32):
                for online, hold in itertools.product(legal["ONLINE"], legal["HOLD"]):
                    try:
                        spec = alt.with_knobs(
                            CLUSTER=cluster, num_warps=warps, ONLINE=online, HOLD=hold
                        )
                    except IllegalSpec:
                        continue
                    out.append((cluster_name(spec), spec))
    return out


def precompile(specs: list[KernelSpec]) -> None:
    """nvcc for every CUDA candidate at once (16 cores), into the shared cubin cache."""
    from ..runtime.cuda.compile import compile_cuda
    from ..runtime.cuda.driver import current_arch

    arch = current_arch()
    rendered = [render(s) for s in specs if s.template == "row_cluster"]
    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        jobs = [pool.submit(compile_cuda, r.source, arch, kernels=(r.entry,)) for r in rendered]
        for job in jobs:
            job.result()


def _time(fn: Callable[[], object]) -> float:
    return time_kernel(lambda: fn(), [()], torch.device("cuda")).median_ms


ABANDON = 1.5  # a candidate whose warm-up runs take this multiple of the best is not timed on


def _wrong(outs: list[torch.Tensor], ref) -> str | None:  # type: ignore[no-untyped-def]
    for i, got in enumerate(outs):
        eager = ref.eager[i] if ref.eager is not None else None
        rejection, _ = compare(i, got, ref.exact[i], eager)
        if rejection is not None:
            return str(rejection.message)
    return None


@contextlib.contextmanager
def _refusals() -> Iterator[list[str]]:
    """Collect why the row-resident alternative was refused (codegen logs it)."""
    found: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: found.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("kernelpro.codegen")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield found
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def run_case(
    op: str,
    rows: int,
    cols: int,
    dtype: torch.dtype,
    backward: bool,
    autotune: bool = False,
    space: SweepSpace = SweepSpace(),
) -> dict:
    sg = row_subgraph(op, rows, cols, dtype, backward)
    seed = lower(sg)
    inputs = sg.make_inputs(0)
    module = sg.module()
    reference = compute_reference(module, inputs)
    nbytes = minimal_bytes(seed)
    row: dict = {"op": op, "pass": "backward" if backward else "forward", "rows": rows}
    row |= {"cols": cols, "dtype": str(dtype).removeprefix("torch."), "bytes": nbytes}
    row["eager_ms"] = _time(lambda: module(*inputs))
    compiled = torch.compile(module)
    compiled(*inputs)
    row["inductor_ms"] = _time(lambda: compiled(*inputs))
    if autotune:
        tuned = torch.compile(module, mode="max-autotune-no-cudagraphs")
        tuned(*inputs)
        row["max_autotune_ms"] = _time(lambda: tuned(*inputs))
    with _refusals() as refused:
        found = candidates(seed, space)
    if refused:
        row["no_cluster"] = refused[0]
    precompile([s for _, s in found])
    row["candidates"] = []
    best_ms = min(row["inductor_ms"], row["eager_ms"])
    for name, spec in found:
        entry: dict = {"name": name, "knobs": dict(spec.knobs)}
        try:
            kernel = build_kernel(spec)
            problem = _wrong(list(kernel(*inputs)), reference)
            if problem:
                entry["error"] = f"wrong: {problem}"[:300]
            else:
                t = time_kernel(
                    functools.partial(kernel, *inputs),
                    [()],
                    torch.device("cuda"),
                    abandon_above_ms=ABANDON * best_ms,
                )
                entry["ms"] = t.median_ms
                if t.method.endswith("abandoned"):
                    entry["abandoned"] = True  # its warm-up's times: far from the best
                best_ms = min(best_ms, t.median_ms)
        except Exception as e:
            entry["error"] = f"{type(e).__name__}: {e}"[:300]
        row["candidates"].append(entry)
    timed = [c for c in row["candidates"] if "ms" in c]
    if timed:
        best = min(timed, key=lambda c: c["ms"])
        row["kernelpro_ms"], row["kernelpro_best"] = best["ms"], best["name"]
    # What the backend runs: its best kernel where that beats both baselines, else the faster
    # of Inductor (the fallback) and eager ATen (a candidate of every search).
    shipped = {"inductor": row["inductor_ms"], "eager": row["eager_ms"]}
    if "kernelpro_ms" in row:
        shipped["kernel"] = row["kernelpro_ms"]
    row["shipped"] = min(shipped, key=lambda k: shipped[k])
    row["shipped_ms"] = shipped[row["shipped"]]
    return row


def _fmt(ms: float | None, nbytes: int) -> str:
    return "-" if ms is None else f"{ms:8.3f} {nbytes / ms / 1e9:5.2f}"


def print_table(meta: dict, results: list[dict]) -> None:
    roof = meta.get("copy_tb_s")
    print(f"\n{meta['device']}  torch {meta['torch']}  DRAM copy roof {roof} TB/s")
    print(
        "case                                   eager ms TB/s  inductor ms TB/s  "
        "max-autotune TB/s  kernelpro ms TB/s  shipped  best"
    )
    for r in results:
        name = f"{r['op']} {r.get('pass', '')[:3]} {r.get('dtype', '')} {r.get('rows')}x{r.get('cols')}"
        if "error" in r:
            print(f"{name:38s} ERROR {r['error'][:80]}")
            continue
        b = r["bytes"]
        print(
            f"{name:38s} {_fmt(r['eager_ms'], b)}  {_fmt(r['inductor_ms'], b)}     "
            f"{_fmt(r.get('max_autotune_ms'), b)}  {_fmt(r.get('kernelpro_ms'), b)}  "
            f"{r.get('shipped', '-'):8s} {r.get('kernelpro_best', '-')}"
        )
    for refusal in sorted({r["no_cluster"] for r in results if "no_cluster" in r}):
        print(f"no row_cluster: {refusal[:300]}")


def copy_roof() -> float:
    """Measured DRAM bandwidth (TB/s): a 2 GiB device-to-device copy, read + write bytes."""
    x = torch.empty(2**29, device="cuda")
    y = torch.empty_like(x)
    ms = _time(lambda: y.copy_(x))
    return round(2 * 2**31 / ms / 1e9, 3)


def _write(out_dir: str, meta: dict, results: list[dict]) -> None:
    path = os.path.join(out_dir, "gpu_row_sweep.json")
    with open(path + ".tmp", "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    os.replace(path + ".tmp", path)


def sweep(
    budget_s: float = 300.0,
    only: tuple[str, ...] = (),
    sizes=SIZES,
    autotune=False,
    space: SweepSpace = SweepSpace(),
) -> int:  # type: ignore[no-untyped-def]
    out_dir = os.environ.get("OUT", ".")
    os.makedirs(out_dir, exist_ok=True)
    start = time.time()
    meta: dict[str, object] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    meta |= {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "copy_tb_s": copy_roof()}
    meta |= {"space": dataclasses.asdict(space)}
    results: list[dict] = []
    ops = ("softmax", "cross_entropy", "rms_norm", "layer_norm", "log_softmax")
    for op in ops:
        for backward in (False, True):
            for dtype in (torch.float32, torch.bfloat16):
                for rows, cols in sizes:
                    name = f"{op} {'bwd' if backward else 'fwd'} {dtype} {rows}x{cols}"
                    if only and not selected(name, only):
                        continue
                    ident = {"op": op, "pass": "backward" if backward else "forward"}
                    ident |= {"rows": rows, "cols": cols, "dtype": str(dtype).split(".")[-1]}
                    if time.time() - start > budget_s:
                        results.append(ident | {"error": "skipped (budget)"})
                        continue
                    print(f"{name} ({time.time() - start:.0f} s)", flush=True)
                    began = time.time()
                    try:
                        case = run_case(op, rows, cols, dtype, backward, autotune, space)
                        results.append(case | {"wall_s": round(time.time() - began, 1)})
                    except Exception as e:
                        traceback.print_exc()
                        results.append(ident | {"error": f"{type(e).__name__}: {e}"[:300]})
                    torch.cuda.empty_cache()
                    _write(out_dir, meta, results)  # a killed run keeps what it measured
    meta["wall_s"] = round(time.time() - start, 1)
    _write(out_dir, meta, results)
    print_table(meta, results)
    return 0
