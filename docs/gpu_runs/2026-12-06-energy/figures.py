"""The energy probe's figures (probe.py): ms by CUDA events (perf_counter in the smoke),
joules per call from an energy meter (profilers/energy.py's loop), methods timed side by side
in interleaved rounds, and the table the probe prints last."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

from kernelpro_backend.profilers.energy import batch_calls, measure_loop

SMOKE = os.environ.get("PROBE_SMOKE") == "1"


def sync() -> None:
    if not SMOKE:
        torch.cuda.synchronize()


def time_ms(fn: Callable[[], Any], iters: int) -> float:
    if SMOKE:
        t = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t) * 1e3 / iters
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters


def joules(fn: Callable[[], Any], meter: Any, call_ms: float) -> float | None:
    """Joules per call of `fn` run back to back in batches of ~5 ms (profilers/energy.py);
    None without NVML."""
    if meter is None:
        return None
    batch = batch_calls(call_ms / 1e3)

    def run() -> int:
        for _ in range(batch):
            fn()
        sync()
        return batch

    reading = measure_loop(run, meter)
    return None if reading is None else reading.joules_per_call


def side_by_side(methods: Mapping[str, Callable[[], Any]], meter: Any) -> dict[str, dict]:
    """Each method's median ms over interleaved rounds of ~5 ms, then its joules per call read
    twice, interleaved across the methods."""
    iters: dict[str, int] = {}
    out: dict[str, dict[str, Any]] = {}
    for name, fn in methods.items():
        fn()
        sync()
        iters[name] = 1 if SMOKE else max(3, min(500, int(5.0 / max(time_ms(fn, 3), 1e-3))))
    samples: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(2 if SMOKE else 9):
        for name, fn in methods.items():
            samples[name].append(time_ms(fn, iters[name]))
    for name in methods:
        out[name] = {"ms": round(statistics.median(samples[name]), 5), "j_runs": []}
    for _ in range(2):
        for name, fn in methods.items():
            out[name]["j_runs"].append(joules(fn, meter, out[name]["ms"]))
    for row in out.values():
        runs = [j for j in row["j_runs"] if j is not None]
        row["J"] = sum(runs) / len(runs) if runs else None
        row["j_spread"] = (max(runs) - min(runs)) / max(runs) if len(runs) > 1 else None
    return out


def table(results: dict[str, Any]) -> str:
    head = (f"{'case':30} {'pick':8} {'ms':>9} {'mJ':>9} {'spread':>6}  "
            f"{'worker ms':>9} {'worker mJ':>9}  winner")  # fmt: skip
    lines = [head, "-" * len(head)]
    for case, row in results.items():
        if "error" in row or "skipped" in row:
            lines.append(f"{case:30} {row.get('error') or row.get('skipped')}"[:160])
            continue
        workers = row.get("worker") or {}
        for mode, m in row["measured"].items():
            mj = "-" if m["J"] is None else f"{m['J'] * 1e3:.4g}"
            spread = "-" if m["j_spread"] is None else f"{100 * m['j_spread']:.1f}%"
            w = workers.get(mode, {})
            wms = f"{w['ms']:.4g}" if w.get("ms") else "-"
            wmj = f"{w['J'] * 1e3:.4g}" if w.get("J") else "-"
            lines.append(f"{case:30} {mode:8} {m['ms']:9.4g} {mj:>9} {spread:>6}  {wms:>9} "
                         f"{wmj:>9}  {w.get('winner', '')}")  # fmt: skip
        same = "same kernel" if row.get("same_kernel") else "DIFFERENT kernels"
        d, wd = row.get("energy_vs_time"), row.get("worker_energy_vs_time")
        text = f"{'':30} energy vs time: {same}"
        if d:
            text += f"; here {100 * d['J']:+.1f}% J at {100 * d['ms']:+.1f}% ms"
        if wd:
            text += f"; in the search {100 * wd['J']:+.1f}% J at {100 * wd['ms']:+.1f}% ms"
        lines.append(text)
        for key, w in (row.get("searches") or {}).items():  # the training step's searches
            t, e = w["time"], w["energy"]
            if t["winner"] != e["winner"] and t.get("J") and e.get("J"):
                lines.append(f"{'':30} search {key}: time {t['winner']} {t['ms']:.4g} ms "
                             f"{t['J'] * 1e3:.4g} mJ, energy {e['winner']} {e['ms']:.4g} ms "
                             f"{e['J'] * 1e3:.4g} mJ")  # fmt: skip
    done = {k: r for k, r in results.items() if "measured" in r}
    differ = [k for k, r in done.items() if not r.get("same_kernel")]
    lines.append(f"energy picked other kernels than time in {len(differ)} of {len(done)} cases"
                 + (f": {', '.join(differ)}" if differ else ""))  # fmt: skip
    return "\n".join(lines)
