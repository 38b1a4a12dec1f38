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


def joules(fn: Callable[[], Any], meter: Any, call_ms: float, min_s: float) -> float | None:
    """Joules per call of `fn` run back to back in batches of ~5 ms, counted between two
    steps of the counter at least `min_s` apart (profilers/energy.py); None without NVML."""
    if meter is None:
        return None
    batch = batch_calls(call_ms / 1e3)

    def run() -> int:
        for _ in range(batch):
            fn()
        sync()
        return batch

    reading = measure_loop(run, meter, min_s=min_s, max_s=2 * min_s + 1.0)
    return None if reading is None else reading.joules_per_call


def side_by_side(
    methods: Mapping[str, Callable[[], Any]], meter: Any, readings: int, min_s: float
) -> dict[str, dict]:
    """Each method's median ms over interleaved rounds of ~5 ms, then its joules per call read
    `readings` times over >= `min_s` each, interleaved across the methods after one reading of
    each that is dropped (the first reading of a training step read up to 20% high on the
    H100, 2026-12-06); J is the median, j_spread (max - min) / max of the readings kept."""
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
    for i in range(readings + 1):
        for name, fn in methods.items():
            j = joules(fn, meter, out[name]["ms"], min_s / 2 if i == 0 else min_s)
            if i:
                out[name]["j_runs"].append(j)
    for row in out.values():
        runs = [j for j in row["j_runs"] if j is not None]
        row["J"] = statistics.median(runs) if runs else None
        row["j_spread"] = (max(runs) - min(runs)) / max(runs) if len(runs) > 1 else None
    return out


# issue 60's target: at least this many fewer joules at no more than TIME_TOLERANCE more time
TARGET_SAVING, TIME_TOLERANCE = 0.10, 0.02


def verdict(row: dict[str, Any]) -> dict[str, Any]:
    """What the energy pick did against the time pick, said honestly: the same kernels give no
    saving whatever the two readings say (their difference is the meter's noise); different
    kernels save only beyond the larger of the two readings' spreads."""
    m, d = row["measured"], row.get("energy_vs_time")
    t, e = m["time"], m["energy"]
    spreads = [s for s in (t.get("j_spread"), e.get("j_spread")) if s is not None]
    noise = max(spreads) if spreads else None
    out: dict[str, Any] = {"saving": False, "meets_target": False, "noise": noise}
    if d is None:
        return {**out, "text": "no joule figure: nothing to compare"}
    delta = f"{100 * d['J']:+.1f}% J at {100 * d['ms']:+.1f}% ms"
    spread = "-" if noise is None else f"{100 * noise:.1f}%"
    if row.get("same_kernel"):
        if row.get("measured_once"):
            return {**out, "text": "same kernel under both rules: no saving (measured once)"}
        return {**out, "text": f"same kernels under both rules: no saving; the {delta} between "
                               f"two measurements of them is noise (readings spread {spread})"}  # fmt: skip
    beyond = noise is not None and -d["J"] > noise
    out["saving"] = beyond and d["ms"] <= TIME_TOLERANCE
    out["meets_target"] = out["saving"] and -d["J"] >= TARGET_SAVING
    if out["saving"]:
        target = "meets" if out["meets_target"] else "under"
        text = f"SAVING {delta} (beyond the readings' {spread} spread; {target} the 10% target)"
    elif beyond:
        text = f"fewer joules but slower than the {100 * TIME_TOLERANCE:g}% tolerance: {delta}"
    else:
        text = f"different kernels, no saving beyond the readings' {spread} spread: {delta}"
    return {**out, "text": text}


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
        v = row.get("verdict") or {}
        lines.append(f"{'':30} energy vs time: {v.get('text', '?')}")
        if w := row.get("worker"):  # a call's search: had the energy rule any choice?
            lines.append(f"{'':30} {_choice(w)}")
        for key, w in (row.get("searches") or {}).items():  # the training step's searches
            t, e = w["time"], w["energy"]
            differ = (
                f"; time {t['winner']}, energy {e['winner']}" if t["winner"] != e["winner"] else ""
            )
            stored = f"; stored: {w['stored']}" if w.get("stored") else ""
            lines.append(f"{'':30} search {key}: {_choice(w)}{differ}{stored}")
        if "kept" in row:
            kept = ", ".join(f"{mode} {len(k)}" for mode, k in row["kept"].items())
            lines.append(f"{'':30} kernels in the compiled step: {kept}")
        for mode, verdicts in (row.get("verdicts") or {}).items():
            judged = "; ".join(map(_verdict, verdicts)) or "none made"
            lines.append(f"{'':30} verdicts {mode}: {judged}")
    done = {k: r for k, r in results.items() if "measured" in r}
    differ = [k for k, r in done.items() if not r.get("same_kernel")]
    saved = [k for k, r in done.items() if (r.get("verdict") or {}).get("saving")]
    lines.append(f"energy picked other kernels than time in {len(differ)} of {len(done)} cases"
                 + (f": {', '.join(differ)}" if differ else ""))  # fmt: skip
    lines.append(
        f"a saving beyond the noise in {len(saved)}" + (f": {', '.join(saved)}" if saved else "")
    )
    return "\n".join(lines)


def _choice(w: dict[str, Any]) -> str:
    """A search's energy choice in a few words: the entries within the time tolerance, their
    joules' range, the energy moves measured, the rule's verdict."""
    why = w.get("energy_why") or {}
    jr = why.get("j_range")
    spread = f", {jr[0] * 1e3:.4g}-{jr[1] * 1e3:.4g} mJ" if jr else ""
    return (f"{why.get('within', '?')} within the time tolerance{spread}; "
            f"{w.get('energy_moves', '?')} energy moves measured; {why.get('rule', '?')}")  # fmt: skip


def _verdict(v: dict[str, Any]) -> str:
    """One graph's in-context verdict: kernels kept, the graph's time with them over without,
    and the rule (a negative margin: objective "energy"'s tolerance)."""
    ratio = v["with_ms"] / v["without_ms"] if v.get("with_ms") and v.get("without_ms") else None
    rule = f" within {-v['margin']:.0%}" if v.get("margin", 0) < 0 else ""
    at = f" at {ratio:.3f}x" if ratio else " untimed"
    return f"{v['graph']} {len(v.get('kept', []))}/{v['kernels']}{at}{rule}"
