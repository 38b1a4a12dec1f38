"""Where a training step's host time goes, one mode of one bench workload per process: the
step synchronized before each of 12 timed steps (host ms of forward + loss, backward, AdamW,
and the whole step), 20 steps free-running, then cProfile over 10 steps (top functions by own
time). With `--gc`: Python's collections during back-to-back windows of steps (gc.callbacks),
and the windows' rates with GC on, off, after gc.freeze() and on again.

    PYTHONPATH=.:docs/gpu_runs/common python docs/gpu_runs/2026-11-27-mini-gpt-launch-path/gpu_step_host.py gpt2_small kernelpro [--gc]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import pstats
import time
from collections.abc import Callable
from typing import Any

import torch

from kernelpro_backend.bench.modes import ensure_kernelpro_registered, make_modes
from kernelpro_backend.bench.workloads import WORKLOADS


def build(name: str, mode: str) -> tuple[Any, Callable[[], list[float]]]:
    """The workload and its step; the step returns its phases' end times (perf_counter)."""
    ensure_kernelpro_registered()
    w = WORKLOADS[name](torch.device("cuda"), None, "full")
    (m,) = [x for x in make_modes([mode], None) if x.name == mode]
    model = w.fresh_model()
    fn = m.wrap(model, None)
    opt = w.make_optimizer(model.parameters())

    def step() -> list[float]:
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = w.loss_fn(fn(*w.inputs))
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        return [t0, t1, t2, time.perf_counter()]

    return w, step


def rate(step: Callable[[], object], n: int) -> float:
    """Ms a step, `n` steps back to back."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e3


def phases(name: str, mode: str, step: Callable[[], list[float]]) -> None:
    names = ("fwd", "bwd", "opt", "host", "step")
    times: dict[str, list[float]] = {k: [] for k in names}
    for _ in range(12):
        torch.cuda.synchronize()
        t0, t1, t2, t3 = step()
        torch.cuda.synchronize()
        t4 = time.perf_counter()
        for k, (a, b) in zip(
            names, ((t0, t1), (t1, t2), (t2, t3), (t0, t3), (t0, t4)), strict=True
        ):
            times[k].append((b - a) * 1e3)
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    print(f"{name} {mode} synchronized ms: " + " ".join(f"{k} {v:.3f}" for k, v in med.items()))
    print(f"free-running ms/step {rate(step, 20):.3f}")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(10):
        step()
    torch.cuda.synchronize()
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(22)
    print(text.getvalue()[-4500:])


def collections(name: str, mode: str, step: Callable[[], object]) -> None:
    n = 60 if name == "mini_gpt" else 30
    spent, counts, started = [0.0, 0.0, 0.0], [0, 0, 0], [0.0]

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            spent[info["generation"]] += time.perf_counter() - started[0]
            counts[info["generation"]] += 1

    out: dict[str, Any] = {"objects": len(gc.get_objects())}
    gc.callbacks.append(watch)
    out["on"] = [rate(step, n) for _ in range(3)]
    gc.callbacks.remove(watch)
    out["collections"], out["gc_ms_per_step"] = counts, [s / (3 * n) * 1e3 for s in spent]
    gc.disable()
    out["off"] = [rate(step, n) for _ in range(3)]
    gc.enable()
    gc.collect()
    gc.freeze()
    out["frozen"] = [rate(step, n) for _ in range(3)]
    gc.unfreeze()
    out["on_again"] = [rate(step, n) for _ in range(3)]
    print(name, mode, json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workload", choices=sorted(WORKLOADS))
    ap.add_argument("mode")
    ap.add_argument("--gc", action="store_true", help="the GC probe instead of the phases")
    args = ap.parse_args()
    _, step = build(args.workload, args.mode)
    for _ in range(5):
        step()
    (collections if args.gc else phases)(args.workload, args.mode, step)


if __name__ == "__main__":
    main()
