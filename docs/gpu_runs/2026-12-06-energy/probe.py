"""Probe: objective="time" against objective="energy" from ONE search per subgraph (issue 60).

Each subgraph is searched once under objective "energy" (every candidate's and baseline's
joules per call measured in the worker, the energy moves proposed); both selection rules then
choose from the same measured candidates (`SearchOutcome.under`): no second search, no second
compile, and the comparison is honest — same candidates, same run. The two winners (and
Inductor's code for the subgraph) are then loaded as a cache hit runs them and timed here side
by side in interleaved rounds: ms by CUDA events, joules per call from NVML's energy counter
read several times, interleaved, after one dropped reading (figures.side_by_side).

Honesty (figures.verdict): where both rules picked the same kernels the row says so and any
joule difference between two measurements of them is reported as the meter's noise, never as
a saving; different kernels save only beyond the larger of their readings' spreads. Each
search records how many entries were within the time tolerance and their joules' range (the
energy rule's `why`: had it any choice at all) and how many energy moves it measured.

Cases: (a) memory-bound rows at 8192x8192 (softmax, LayerNorm, RMSNorm; fp32 and bf16), cut by
explain's find_subgraphs (search off) and searched directly; (b) the GEMM sweep's kinds
(bf16, fp32 under TF32, 4096^3; CUTLASS builds off: Triton candidates only); (c) two training
steps, a GPT block's (4x1024x1024) and the bench's MLP workload (8192 rows, width 1024, hidden
4096: its LayerNorms over 4096), bf16, or fp32 with PROBE_TRAIN_DTYPE=fp32: each compiled once under "energy" (its row
subgraphs searched), then once more with each search's "time" pick replayed without
searching, then by Inductor; joules per step, the kernels each compiled step kept and each
graph's in-context verdict (under "energy": kept unless the graph is slower beyond 2%), and per
search what an "energy" cache stored (the energy rule's pick, marked "energy" and served for its
joules, or the time rule's where the finder would refuse it). All searches share one cache, so
one worker pool and one ceilings measurement.

The time rule here chooses among the energy search's candidates, which include the moves only
objective "energy" proposes (fewer warps/stages): a search under "time" would not propose
those, and its tree (so its trials) would differ; the budget is the same.

No case starts after --deadline-s (190 s: about 210-240 s in all on one H100, est.); those
left are listed. Writes $OUT/energy.json (after each case) and $OUT/energy.txt; prints the
table last.

    PYTHONPATH=. OUT=/tmp/out python docs/gpu_runs/2026-12-06-energy/probe.py [--only softmax]
    PROBE_SMOKE=1 python docs/gpu_runs/2026-12-06-energy/probe.py  # or --smoke: CPU, Triton's
        interpreter, a fake measurer and a fake energy meter: the probe's own logic end to end
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SMOKE = os.environ.get("PROBE_SMOKE") == "1" or "--smoke" in sys.argv
if SMOKE:
    os.environ["TRITON_INTERPRET"] = "1"
    os.environ["PROBE_SMOKE"] = "1"  # what figures.py and smoke.py read

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from figures import side_by_side, sync, table  # noqa: E402  (beside this file)
from search_log import compare as _compare  # noqa: E402
from search_log import energy_moves, top_trials  # noqa: E402
from smoke import FakeMeter, FakeSearcher, log_path  # noqa: E402

from kernelpro_backend import make_backend  # noqa: E402
from kernelpro_backend.bench.models import GPTBlock  # noqa: E402
from kernelpro_backend.bench.workloads import mlp  # noqa: E402
from kernelpro_backend.explain import find_subgraphs as cut_subgraphs  # noqa: E402
from kernelpro_backend.options import Options  # noqa: E402
from kernelpro_backend.profilers.energy import (  # noqa: E402
    NvmlMeter,
    power_cap,
)
from kernelpro_backend.runtime.precision import precision_mode  # noqa: E402
from kernelpro_backend.tuner import KernelFinder, load_artifact  # noqa: E402
from kernelpro_backend.tuner.eager import eager_kernel, is_eager  # noqa: E402
from kernelpro_backend.tuner.reprove import Reprover  # noqa: E402
from kernelpro_backend.tuner.searcher import SubgraphSearcher, outcome_artifact  # noqa: E402

DEV = "cpu" if SMOKE else "cuda"
ROWS, GEMM = (64, 256) if SMOKE else (8192, 4096)
RULES = ("time", "energy")
ROW_PATTERNS = ("layer_norm", "layer_norm_backward", "softmax", "softmax_backward",
                "rms_norm", "rms_norm_backward", "norm", "norm_backward")  # fmt: skip
F32, BF16 = torch.float32, torch.bfloat16


def _softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def _rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w


def _layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


# name: (function, its inputs' shapes, dtype, precision option); one of each kind first, so a
# run cut by --deadline-s has rows, a GEMM and the training step
CALLS: dict[str, tuple[Callable[..., Any], list[tuple[int, ...]], torch.dtype, str]] = {
    f"softmax {ROWS}x{ROWS} fp32": (_softmax, [(ROWS, ROWS)], F32, "auto"),
    f"gemm bf16 {GEMM}^3": (_mm, [(GEMM, GEMM), (GEMM, GEMM)], BF16, "auto"),
    f"rmsnorm {ROWS}x{ROWS} bf16": (_rmsnorm, [(ROWS, ROWS), (ROWS,)], BF16, "auto"),
    f"layernorm {ROWS}x{ROWS} fp32": (_layernorm, [(ROWS, ROWS), (ROWS,), (ROWS,)], F32, "auto"),
    f"softmax {ROWS}x{ROWS} bf16": (_softmax, [(ROWS, ROWS)], BF16, "auto"),
    f"gemm fp32 {GEMM}^3 tf32": (_mm, [(GEMM, GEMM), (GEMM, GEMM)], F32, "tf32"),
    f"layernorm {ROWS}x{ROWS} bf16": (_layernorm, [(ROWS, ROWS), (ROWS,), (ROWS,)], BF16, "auto"),
    f"rmsnorm {ROWS}x{ROWS} fp32": (_rmsnorm, [(ROWS, ROWS), (ROWS,)], F32, "auto"),
}
# the training steps, each after this many call cases
TRAIN_DTYPE = F32 if os.environ.get("PROBE_TRAIN_DTYPE") == "fp32" else BF16
TAG = "fp32" if TRAIN_DTYPE == F32 else "bf16"
TRAIN_GPT = f"train gpt_block {TAG} " + ("2x16x64" if SMOKE else "4x1024x1024")
TRAIN_MLP = f"train mlp {TAG} " + ("16x32x64" if SMOKE else "8192x1024x4096")
TRAINS = {TRAIN_GPT: 3, TRAIN_MLP: 4}
# Joule readings: a call's (3 of >= 0.3 s: 0.3-3.8% apart on the H100 at 2 of 0.2 s) and a
# training step's (4 of >= 1 s: 2 of 0.2 s read one step 6-17% apart, 2026-12-06)
CALL_READINGS, CALL_MIN_S = 3, 0.3
TRAIN_READINGS, TRAIN_MIN_S = 4, 1.0


def search_options(cache_dir: str, budget_s: float, trials: int, **extra: Any) -> Options:
    return Options.resolve(options={
        "search": "on-miss", "objective": "energy", "budget_s": budget_s, "max_trials": trials,
        "cache_dir": cache_dir, "progress": False, "cutlass_jobs": 0, **extra,
    })  # fmt: skip


def picks(searcher: Any, sg: Any) -> dict[str, Any]:
    """The last search's pick under each rule: the artifact a cache would keep, and the
    worker's own figures (ms, J) for it."""
    outcome = searcher.outcome
    out: dict[str, Any] = {"artifacts": {}, "worker": {}}
    for rule in RULES:
        under = outcome.under(rule)
        out["artifacts"][rule] = outcome_artifact(under, sg, log_path(searcher, sg),
                                                  searcher.layout.cubin_root, searcher.options)  # fmt: skip
        r = under.result
        out["worker"][rule] = {
            "winner": under.winner if isinstance(under.winner, str) else f"#{under.winner_id}",
            "ms": r.median_ms if r else None, "J": r.energy_j if r else None,
        }  # fmt: skip
    out["worker"]["energy_why"] = outcome.choices["energy"].why  # within, j_range, rule
    # what an "energy" cache stores: the energy rule's pick marked "energy" (served for its
    # joules), the time rule's ("time": the finder would have refused the energy pick), or none
    stored = out["artifacts"]["energy"]
    out["worker"]["stored"] = "none" if stored is None else stored.objective
    out["worker"]["energy_moves"] = energy_moves(log_path(searcher, sg))
    out["worker"]["baselines"] = {k: {"ms": v.median_ms, "J": v.energy_j}
                                  for k, v in outcome.baselines.items()}  # fmt: skip
    out["worker"]["trials"] = outcome.trials
    out["worker"]["candidates"] = top_trials(log_path(searcher, sg))
    return out


def runnable(artifact: Any, sg: Any, fallback: Callable[..., Any]) -> Callable[..., Any]:
    if artifact is None:
        return fallback
    return eager_kernel(sg) if is_eager(artifact) else load_artifact(artifact)


def call_subgraph(fn: Callable[..., Any], shapes: list, dtype: torch.dtype, precision: str) -> Any:
    """The row or GEMM subgraph a compile of `fn` cuts (dynamo, Inductor's front half and the
    partitioner, as explain does: make_fx alone leaves aten._softmax, which no template
    lowers), search off; the eager fallback, whose subgraphs and keys are Inductor's (backend.py)
    without its compile."""
    torch._dynamo.reset()
    inputs = [torch.randn(s, dtype=dtype, device=DEV) for s in shapes]
    opts = {"precision": precision, "fallback": "eager"}
    model: Any = fn
    found = [s for s in cut_subgraphs(model, *inputs, train=False, backend_options=opts)
             if s.kind in ("reduction", "gemm")]  # fmt: skip
    assert found, "no row or GEMM subgraph cut"
    return found[0]


def run_call(name: str, searcher: Any, meter: Any) -> dict[str, Any]:
    fn, shapes, dtype, precision = CALLS[name]
    sg = call_subgraph(fn, shapes, dtype, precision)
    row: dict[str, Any] = {"pattern": sg.pattern, "precision": sg.precision}
    t0 = time.time()
    searcher(sg)
    row["search_s"] = round(time.time() - t0, 1)
    if searcher.outcome is None:
        return {**row, "error": f"not searched: {searcher.skipped}"}
    found = picks(searcher, sg)
    row["worker"] = found["worker"]
    arts = found["artifacts"]
    row["same_kernel"] = _same(arts["time"], arts["energy"])
    module = sg.module()
    inductor = module if SMOKE else torch.compile(module)  # the fallback: Inductor's code
    inputs = sg.make_inputs(1, DEV)
    kernels = {rule: runnable(arts[rule], sg, inductor) for rule in RULES}
    methods = {"time": kernels["time"]}
    if not row["same_kernel"]:
        methods["energy"] = kernels["energy"]
    methods["inductor"] = inductor
    with torch.no_grad(), precision_mode(sg.precision):
        ref = [o.float() for o in _outs(module(*inputs))]
        row["max_err"] = {r: _err(kernels[r](*inputs), ref) for r in methods if r in kernels}
        calls = {k: (lambda f=f: f(*inputs)) for k, f in methods.items()}
        row["measured"] = side_by_side(calls, meter, CALL_READINGS, CALL_MIN_S)
    m = row["measured"]
    row["measured_once"] = "energy" not in m  # the same kernel: one measurement serves both
    row["measured"] = {"time": m["time"], "energy": m.get("energy", m["time"]), **m}
    return _compare(row)


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    return (a.source, a.entry, a.spec_json, a.language) == (b.source, b.entry, b.spec_json,
                                                            b.language)  # fmt: skip


def _outs(value: Any) -> list[torch.Tensor]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _err(value: Any, ref: list[torch.Tensor]) -> float:
    got = _outs(value)
    return max(float((g.float() - r).abs().max()) for g, r in zip(got, ref, strict=True))


class Recorder:
    """The energy compile's searcher: searches as SubgraphSearcher does, and keeps each
    outcome by subgraph key for the replay."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.searched: dict[str, Any] = {}

    @property
    def skipped(self) -> str | None:
        return self.inner.skipped

    def __call__(self, sg: Any) -> Any:
        artifact = self.inner(sg)
        if self.inner.outcome is not None:
            self.searched[sg.key.digest] = picks(self.inner, sg)
        return artifact


class Replay:
    """The time compile's searcher: no search; each subgraph gets the "time" pick of the energy
    compile's search of the same key (same candidates, same measurements)."""

    def __init__(self, searched: dict[str, Any]) -> None:
        self.searched = searched
        self.skipped: str | None = None

    def __call__(self, sg: Any) -> Any:
        found = self.searched.get(sg.key.digest)
        self.skipped = None if found else "not searched by the energy compile"
        return found["artifacts"]["time"] if found else None


def _provider(searcher: Any) -> Callable[[Options], Any]:
    return lambda opts: KernelFinder.from_options(opts, searcher=searcher, prover=Reprover(opts))


def train_case(name: str) -> tuple[torch.nn.Module, tuple[Any, ...], Callable[[Any], Any]]:
    """(model, inputs, loss) of a training step: the GPT block at 4x1024x1024, or the bench's
    MLP workload (Linear -> LayerNorm -> GELU twice, a head) at its "full" size; TRAIN_DTYPE."""
    torch.manual_seed(0)
    if name == TRAIN_GPT:
        b, t, d = (2, 16, 64) if SMOKE else (4, 1024, 1024)
        model = GPTBlock(d, 4 if SMOKE else 16).to(DEV, TRAIN_DTYPE)
        x = torch.randn(b, t, d, device=DEV, dtype=TRAIN_DTYPE)
        return model, (x,), lambda out: out.float().pow(2).mean()
    w = mlp(torch.device(DEV), TRAIN_DTYPE, "tiny" if SMOKE else "full")
    assert w.loss_fn is not None
    return w.model, w.inputs, w.loss_fn


def run_train(name: str, cache: str, budget_s: float, trials: int, meter: Any) -> dict[str, Any]:
    base, inputs, loss_fn = train_case(name)
    extra = {"search_patterns": ROW_PATTERNS, **({"fallback": "eager"} if SMOKE else {})}
    opts = search_options(cache, budget_s, trials, **extra)
    recorder = Recorder(FakeSearcher(opts) if SMOKE else SubgraphSearcher(opts))
    common: dict[str, Any] = {"search": "on-miss", "progress": False, **extra}
    plans = {
        "energy": (_provider(recorder), {**common, "objective": "energy", "cache_dir": cache}),
        "time": (_provider(Replay(recorder.searched)),
                 {**common, "cache_dir": tempfile.mkdtemp(prefix="kp-energy-time-")}),
    }  # fmt: skip
    row: dict[str, Any] = {"compile_s": {}, "kept": {}, "verdicts": {}}
    steps: dict[str, Callable[[], None]] = {}
    sessions_of: dict[str, list[Any]] = {}
    for mode in ("energy", "time", "inductor"):
        if SMOKE and mode == "inductor":
            continue
        torch._dynamo.reset()
        model = copy.deepcopy(base)  # the same weights in every mode
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=not SMOKE)
        sessions: list[Any] = []
        if mode == "inductor":
            compiled = torch.compile(model)
        else:
            provider, options = plans[mode]
            backend = make_backend(provider=provider, sessions=sessions)
            compiled = torch.compile(model, backend=backend, options=options)

        def step(c: Any = compiled, o: Any = opt) -> None:
            o.zero_grad(set_to_none=True)
            loss_fn(c(*inputs)).backward()
            o.step()

        t0 = time.time()
        step()
        sync()
        row["compile_s"][mode] = round(time.time() - t0, 1)
        steps[mode], sessions_of[mode] = step, sessions
    row["searches"] = {k[:12]: v["worker"] for k, v in recorder.searched.items()}
    row["measured"] = side_by_side(steps, meter, TRAIN_READINGS, TRAIN_MIN_S)
    for mode, sessions in sessions_of.items():
        # the kernels the compiled step ran: read after the steps measured, so after an
        # in-context verdict dropped any
        row["kept"][mode] = sorted({k for s in sessions for r in s.reports
                                    for k in r.replaced if k not in r.dropped})  # fmt: skip
        # each graph's in-context verdict (under "energy": margin -0.02, kept unless slower
        # beyond 2%; rewrite/verdict_plan.py)
        row["verdicts"][mode] = [{"graph": r.graph, "kernels": len(r.replaced), **r.verdict}
                                 for s in sessions for r in s.reports if r.verdict]  # fmt: skip
    row["same_kernel"] = _same_step(row["kept"], recorder.searched)
    return _compare(row)


def _same_step(kept: dict[str, list[str]], searched: dict[str, Any]) -> bool:
    """Whether the energy and time steps run the same kernels: kernels kept for the same
    subgraphs, and each of those the same pick under both rules (a kernel's id names its
    subgraph's key, not its knobs)."""
    keys = {mode: {k.split("/")[0] for k in kept.get(mode, [])} for mode in RULES}
    if keys["time"] != keys["energy"]:
        return False
    return all(_same(v["artifacts"]["time"], v["artifacts"]["energy"])
               for digest, v in searched.items() if digest[:24] in keys["time"])  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--budget-s", type=float, default=4.0, help="search seconds per subgraph")
    p.add_argument("--trials", type=int, default=12, help="most candidates per search")
    p.add_argument("--train-budget-s", type=float, default=3.0, help="per training subgraph")
    p.add_argument("--deadline-s", type=float, default=190.0, help="no case starts after this")
    p.add_argument("--only", action="append", default=[], help="cases whose name has this")
    p.add_argument("--smoke", action="store_true", help="CPU, fake measurer and meter")
    a = p.parse_args()
    out = Path(os.environ.get("OUT", "."))
    started = time.time()
    meter: Any = FakeMeter() if SMOKE else NvmlMeter.open(0)
    cap = power_cap(meter)
    meta = {"device": "cpu (smoke)" if SMOKE else torch.cuda.get_device_name(),
            "torch": torch.__version__, "power_cap": cap.to_dict() if cap else None,
            "budget_s": a.budget_s, "trials": a.trials, "nvml": meter is not None}  # fmt: skip
    cache = tempfile.mkdtemp(prefix="kp-energy-")  # one for every search: one pool, one ceilings
    opts = search_options(cache, a.budget_s, a.trials)
    searcher: Any = FakeSearcher(opts) if SMOKE else SubgraphSearcher(opts)
    if not SMOKE:
        searcher.prestart()  # the pool's ~15 s start overlaps the first case's cut
    names = list(CALLS)
    for train, at in sorted(TRAINS.items(), key=lambda t: -t[1]):
        names.insert(at, train)
    results: dict[str, Any] = {}
    for name in names:
        if a.only and not any(o in name for o in a.only):
            continue
        if time.time() - started > a.deadline_s:
            results[name] = {"skipped": f"past --deadline-s {a.deadline_s:g}: --only '{name}'"}
            continue
        t0 = time.time()
        try:
            if name in TRAINS:
                results[name] = run_train(name, cache, a.train_budget_s, a.trials, meter)
            else:
                results[name] = run_call(name, searcher, meter)
        except Exception as e:  # noqa: BLE001 - one case failing must not lose the others
            results[name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        results[name]["case_s"] = round(time.time() - t0, 1)
        print(name, json.dumps(results[name], default=str)[:400], flush=True)
        meta["elapsed_s"] = round(time.time() - started, 1)
        (out / "energy.json").write_text(json.dumps({"meta": meta, "cases": results}, indent=1,
                                                    default=str))  # fmt: skip
    text = table(results)
    (out / "energy.txt").write_text(f"{json.dumps(meta)}\n{text}\n")
    print(json.dumps(meta))
    print(text)


if __name__ == "__main__":
    main()
