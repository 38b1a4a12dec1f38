"""GPU end to end: warm up the demo's transformer block (search on miss, forward and backward),
export the cache as a bundle, then in fresh processes train from the cache alone
("cache-only": zero searches) and from the bundle imported into an empty cache; compare
numerics with eager and the warm-up run, and time-to-first-step and step time with plain
Inductor in the same process.

    OUT=/tmp/out python3 scripts/gpu_e2e.py [--trials 6] [--budget-s 8]
Writes $OUT/e2e.json, $OUT/bundle.tar.gz, $OUT/warmup.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

BATCH, SEQ = 8, 512  # the demo's size on a GPU


def make():
    from kernelpro_backend import examples

    return examples.transformer_block("cuda", batch=BATCH, seq=SEQ)


def train_steps(fn, model, x, steps=3):
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = fn(x).float().square().mean()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    grads = [p.grad.detach().float().cpu() for p in model.parameters()]
    return losses, grads


def step_ms_interleaved(runs: dict, rounds=11, steps=20) -> dict:
    """Step time per mode, with the modes' rounds interleaved so that clock and thermal drift
    hit all of them alike. `runs`: mode -> (fn, model, x)."""
    steppers = {}
    for mode, (fn, model, x) in runs.items():
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)

        def step(fn=fn, x=x, opt=opt):
            opt.zero_grad(set_to_none=True)
            fn(x).float().square().mean().backward()
            opt.step()

        steppers[mode] = step
    out: dict = {mode: [] for mode in runs}
    for _ in range(rounds):
        for mode, step in steppers.items():
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            s.record()
            for _ in range(steps):
                step()
            e.record()
            torch.cuda.synchronize()
            out[mode].append(s.elapsed_time(e) / steps)
    return out


def phase_train(cache_dir: str) -> dict:
    """Fresh process: cache-only kernelpro vs Inductor vs eager, side by side."""
    from kernelpro_backend import make_backend

    sessions = []
    result = {}
    runs = {}
    for mode in ("eager", "inductor", "kernelpro"):
        torch._dynamo.reset()
        model, (x,) = make()
        if mode == "eager":
            fn = model
        elif mode == "inductor":
            fn = torch.compile(model)
        else:
            fn = torch.compile(
                model,
                backend=make_backend(sessions=sessions),
                options={"search": "cache-only", "cache_dir": cache_dir},
            )
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        losses, grads = train_steps(fn, model, x, steps=1)
        torch.cuda.synchronize()
        first = time.perf_counter() - t0
        more, grads = train_steps(fn, model, x, steps=2)
        result[mode] = {"time_to_first_step_s": first, "losses": losses + more, "grads": grads}
        runs[mode] = (fn, model, x)
    for mode, times in step_ms_interleaved(runs).items():
        result[mode]["step_ms"] = times
    replaced = sum(len(r.replaced) for s in sessions for r in s.reports)
    found = sum(r.subgraphs for s in sessions for r in s.reports)
    eager = result["eager"]
    out = {"replaced": replaced, "subgraphs": found}
    for mode in ("inductor", "kernelpro"):
        r = result[mode]
        out[mode] = {
            "time_to_first_step_s": r["time_to_first_step_s"],
            "losses": r["losses"],
            "loss_rel_err_vs_eager": max(
                abs(a - b) / abs(b) for a, b in zip(r["losses"], eager["losses"], strict=True)
            ),
            "grad_max_rel_err_vs_eager": max(
                ((g - e).abs().max() / e.abs().max().clamp_min(1e-12)).item()
                for g, e in zip(r["grads"], eager["grads"], strict=True)
            ),
            "step_ms_median": statistics.median(r["step_ms"]),
            "step_ms_rounds": r["step_ms"],
        }
    out["eager"] = {
        "losses": eager["losses"],
        "step_ms_median": statistics.median(eager["step_ms"]),
        "time_to_first_step_s": eager["time_to_first_step_s"],
    }
    return out


def run_child(cache_dir: str) -> dict:
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, __file__, "--phase", "train", "--cache-dir", cache_dir],
        capture_output=True,
        text=True,
        env=env,
        timeout=400,
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", default="all")
    ap.add_argument("--cache-dir")
    ap.add_argument("--trials", type=int, default=6)
    ap.add_argument("--budget-s", type=float, default=8)
    ap.add_argument("--workers", type=int, default=4)
    args = ap.parse_args()
    if args.phase == "train":
        print(json.dumps(phase_train(args.cache_dir)))
        return

    from kernelpro_backend.cache import KernelCache
    from kernelpro_backend.cache.bundle import export_bundle, import_bundle
    from kernelpro_backend.warmup import warmup

    out_dir = os.environ.get("OUT", ".")
    work = "/tmp/kp_e2e"
    warm_dir, import_dir = f"{work}/warm", f"{work}/imported"
    os.makedirs(work, exist_ok=True)
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}

    model, (x,) = make()
    t0 = time.time()
    wr = warmup(
        model,
        (x,),
        train=True,
        budget_s=args.budget_s,
        options={
            "cache_dir": warm_dir,
            "max_trials": args.trials,
            "workers": args.workers,
            "progress": False,
        },
    )
    report["warmup_s"] = time.time() - t0
    report["warmup"] = [r.__dict__ for r in wr.rows]
    with open(os.path.join(out_dir, "warmup.txt"), "w") as f:
        f.write(wr.table() + "\n")
    print(wr.table(), flush=True)

    bundle = os.path.join(out_dir, "bundle.tar.gz")
    with KernelCache(warm_dir) as cache:
        report["bundle_entries"] = len(export_bundle(cache, bundle))
    with KernelCache(import_dir) as cache:
        imp = import_bundle(cache, bundle)
        report["imported"] = len(imp.imported)
        report["refused"] = [str(r) for r in imp.refused]

    logs_before = len(os.listdir(os.path.join(warm_dir, "logs")))
    report["cache_only"] = run_child(warm_dir)
    report["searches_in_cache_only_run"] = (
        len(os.listdir(os.path.join(warm_dir, "logs"))) - logs_before
    )
    report["from_bundle"] = run_child(import_dir)
    a, b = report["cache_only"]["kernelpro"]["losses"], report["from_bundle"]["kernelpro"]["losses"]
    report["bundle_losses_identical"] = a == b
    with open(os.path.join(out_dir, "e2e.json"), "w") as f:
        json.dump(report, f, indent=1)

    print(f"\n{report['device']}  torch {report['torch']}  warm-up {report['warmup_s']:.0f} s")
    print(
        f"bundle: {report['bundle_entries']} entries exported, {report['imported']} imported, "
        f"{len(report['refused'])} refused; searches in cache-only run: "
        f"{report['searches_in_cache_only_run']}"
    )
    for run in ("cache_only", "from_bundle"):
        r = report[run]
        print(f"[{run}] kernels used: {r['replaced']} of {r['subgraphs']} subgraphs")
        for mode in ("eager", "inductor", "kernelpro"):
            m = r[mode]
            err = m.get("loss_rel_err_vs_eager", 0.0)
            print(
                f"  {mode:<10} first step {m['time_to_first_step_s']:6.2f} s  "
                f"step {m['step_ms_median']:7.3f} ms  loss rel err {err:.2e}"
            )
    print(f"bundle run losses identical to cache-only run: {report['bundle_losses_identical']}")


if __name__ == "__main__":
    main()
