"""GPU probe (issue 57 item 5): one model of the bench's corpus warmed up with the default
options into a fresh cache, as `kernelpro warmup` runs it (the worker pool booting while the
model is built, a planned search, the in-context check), then eager, Inductor and kernelpro
(cache-only, that cache) timed side by side by the bench's runner.

    OUT=/tmp/out python docs/gpu_runs/2026-12-06-warmup-corpus/probe.py
    KP_MODEL=hf_qwen2 KP_DEADLINE_S=480 KP_BENCH=0 OUT=/tmp/out python .../probe.py  # warm only
    KP_MODEL=hf_qwen2 KP_WARM=0 OUT=/tmp/out python .../probe.py  # then time, same cache

Env: KP_MODEL (hf_bert; any name of bench.workloads.WORKLOADS), KP_DEADLINE_S (the warm-up's
deadline, default 400: BERT's warm-up and its timing fit one 10-minute call; `kernelpro warmup`
itself defaults to 480), KP_CACHE (default /tmp/kp_warmup_corpus/<model>; emptied first unless
KP_WARM=0 or KP_RESUME=1, which goes on from what is there), KP_BENCH=0 (warm only), KP_WARM=0
(time only), KP_ROUNDS (5).
Writes $OUT/warmup_corpus.json ({model: {"warmup_s", "setup_s", "phases", "plan", "context",
"eager_ms", "inductor_ms", "kernelpro_ms", "inductor_peak_mib", "kernelpro_peak_mib",
"kernels", "status"}}; the warm-up's part as soon as it ends) and $OUT/warmup_rows.json (the
warm-up's rows, one per distinct subgraph key); prints a table last.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

MODEL = os.environ.get("KP_MODEL", "hf_bert")
DEADLINE_S = float(os.environ.get("KP_DEADLINE_S", "400"))
CACHE = Path(os.environ.get("KP_CACHE", f"/tmp/kp_warmup_corpus/{MODEL}"))
WARM = os.environ.get("KP_WARM", "1") != "0"
BENCH = os.environ.get("KP_BENCH", "1") != "0"
RESUME = os.environ.get("KP_RESUME", "0") == "1"
ROUNDS = int(os.environ.get("KP_ROUNDS", "5"))
OUT = Path(os.environ.get("OUT", "out"))


def say(line: str) -> None:
    print(f"[probe] {line}", file=sys.stderr, flush=True)


def warm() -> dict[str, Any]:
    """The warm-up as `kernelpro warmup` runs it: provider (pool booting) first, then the model,
    then `warmup` with the default options but the cache directory and the deadline."""
    from kernelpro_backend.bench.workloads import WORKLOADS
    from kernelpro_backend.warmup.offline import search_provider, warmup, warmup_options

    options = {"cache_dir": str(CACHE)}
    t0 = time.perf_counter()
    provider = search_provider(warmup_options(options, None))
    workload = WORKLOADS[MODEL](torch.device("cuda"), None, "full")
    setup_s = time.perf_counter() - t0
    report = warmup(
        workload.fresh_model(),
        workload.inputs,
        train=workload.training,
        loss_fn=workload.loss_fn,
        options=options,
        provider=provider,
        deadline_s=DEADLINE_S,
    )
    total_s = time.perf_counter() - t0
    print(report.table(), file=sys.stderr, flush=True)
    del workload
    gc.collect()
    torch.cuda.empty_cache()
    summary = report.to_dict()
    (OUT / "warmup_rows.json").write_text(json.dumps(summary["rows"], indent=1))
    return {
        "warmup_s": round(total_s, 1),
        "setup_s": round(setup_s, 1),
        "deadline_s": DEADLINE_S,
        "phases": summary["phases"],
        "plan": summary["plan"],
        "context": summary["context"],
    }


def bench() -> dict[str, Any]:
    """Eager, Inductor and kernelpro (cache-only, the warmed cache) side by side."""
    from kernelpro_backend.bench.modes import EAGER, INDUCTOR, KERNELPRO, make_modes
    from kernelpro_backend.bench.runner import RunConfig, run_workloads
    from kernelpro_backend.bench.workloads import WORKLOADS

    modes = make_modes([EAGER, INDUCTOR, KERNELPRO], {"cache_dir": str(CACHE)})
    config = RunConfig(modes=modes, rounds=ROUNDS)
    device = torch.device("cuda")
    (result,) = run_workloads([(MODEL, lambda: WORKLOADS[MODEL](device, None, "full"))], config)
    by_mode = {m.mode: m for m in result.modes}
    out: dict[str, Any] = {"status": {m.mode: m.status for m in result.modes}}
    for name, key in ((EAGER, "eager"), (INDUCTOR, "inductor"), (KERNELPRO, "kernelpro")):
        mode = by_mode.get(name)
        out[f"{key}_ms"] = None if mode is None else mode.median_ms
        out[f"{key}_compile_s"] = None if mode is None else mode.compile_s
        if key != "eager":
            out[f"{key}_peak_mib"] = None if mode is None else mode.step_peak_mib
    kp = by_mode.get(KERNELPRO)
    out["kernels"] = "" if kp is None else kp.kernels
    out["rewrites"] = "" if kp is None else kp.rewrites
    return out


def table(row: dict[str, Any]) -> str:
    def ms(key: str) -> str:
        value = row.get(key)
        return "-" if value is None else f"{value:.2f}"

    speedup = "-"
    if row.get("inductor_ms") and row.get("kernelpro_ms"):
        speedup = f"{row['inductor_ms'] / row['kernelpro_ms']:.2f}x"
    phases = ", ".join(f"{k} {v:.0f}s" for k, v in row.get("phases", {}).items())
    plan = row.get("plan") or {}
    lines = [
        f"model {MODEL}  warm-up {row.get('warmup_s', '-')} s (deadline {DEADLINE_S:.0f} s; "
        f"setup {row.get('setup_s', '-')} s)",
        f"  phases: {phases or '-'}",
        f"  plan: {plan.get('distinct', '-')} distinct of {plan.get('occurrences', '-')}, "
        f"planned {plan.get('planned', '-')}, searched {plan.get('searched', '-')}, found "
        f"{plan.get('found', '-')}, below floor {plan.get('below_floor', '-')}, not reached "
        f"{plan.get('not_reached', '-')}, cached {plan.get('cached', '-')}",
        f"  eager {ms('eager_ms')} ms  inductor {ms('inductor_ms')} ms  kernelpro "
        f"{ms('kernelpro_ms')} ms  ({speedup} over Inductor; kernels {row.get('kernels', '-')})",
        f"  peak MiB: inductor {ms('inductor_peak_mib')}  kernelpro {ms('kernelpro_peak_mib')}",
    ]
    return "\n".join(lines)


def main() -> int:
    if not torch.cuda.is_available():
        print("probe: no CUDA GPU here; run it on the GPU machine", file=sys.stderr)
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    if WARM and not RESUME and CACHE.exists():
        shutil.rmtree(CACHE)
    CACHE.mkdir(parents=True, exist_ok=True)
    path = OUT / "warmup_corpus.json"
    row: dict[str, Any] = {}
    if WARM:
        say(f"warming {MODEL} into {CACHE}, deadline {DEADLINE_S:.0f} s")
        row.update(warm())
        path.write_text(json.dumps({MODEL: row}, indent=1))
    if BENCH:
        say(f"timing {MODEL}: eager, inductor, kernelpro (cache-only)")
        row.update(bench())
        path.write_text(json.dumps({MODEL: row}, indent=1))
    print(table(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
