"""GPU check for the backend (issue [backend]): the three example models train on CUDA under
kernelpro (fallback only) and match eager; step time of fallback-only kernelpro vs plain Inductor,
measured side by side in one process, interleaved, twice.

    python scripts/gpu_backend.py        # writes $OUT/backend_gpu.json
"""

from __future__ import annotations

import json
import os
import statistics
import time

import torch

from kernelpro_backend import examples, make_backend

# Large enough that a step is GPU-bound (several ms), not launch-bound.
SIZES = {
    "mlp": {"batch": 65536},
    "transformer_block": {"batch": 32, "seq": 512},
    "convnet": {"batch": 256},
}


def make_step(name, wrap):
    torch.manual_seed(0)
    model, (x,) = examples.EXAMPLES[name]("cuda", **SIZES[name])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    fn = wrap(model)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = fn(x).square().mean()
        loss.backward()
        opt.step()
        return loss

    return step


def step_ms(step, steps=20):
    """Mean step time over `steps` back-to-back steps (CUDA events around the batch)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(steps):
        step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / steps


def main():
    out_dir = os.environ.get("OUT", ".")
    modes = {
        "eager": lambda m: m,
        "inductor": lambda m: torch.compile(m),
        "kernelpro": lambda m: torch.compile(m, backend=make_backend()),
        "kernelpro-eager-fb": lambda m: torch.compile(
            m, backend=make_backend(), options={"fallback": "eager"}
        ),
    }
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "models": {}}
    for name in examples.EXAMPLES:
        steps, first, losses = {}, {}, {}
        for mode, wrap in modes.items():
            torch._dynamo.reset()
            steps[mode] = make_step(name, wrap)
            t0 = time.perf_counter()
            losses[mode] = [float(steps[mode]()) for _ in range(3)]
            torch.cuda.synchronize()
            first[mode] = time.perf_counter() - t0
        rounds = {m: [] for m in modes}
        for _ in range(7):  # interleaved rounds, so drift hits every mode alike
            for mode in modes:
                rounds[mode].append(step_ms(steps[mode]))
        timing = {
            m: {"median": statistics.median(r), "min": min(r), "max": max(r), "rounds": r}
            for m, r in rounds.items()
        }
        match = {
            m: max(
                abs(a - b) / max(abs(b), 1e-6)
                for a, b in zip(losses[m], losses["eager"], strict=True)
            )
            for m in modes
        }
        results["models"][name] = {
            "size": SIZES[name],
            "first3_s": first,
            "loss_rel_err": match,
            "step_ms": timing,
        }
    with open(os.path.join(out_dir, "backend_gpu.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(f"\n{results['device']}  torch {results['torch']}")
    print(
        f"{'model':<18}{'mode':<20}{'step ms median':>15}{'min':>9}{'max':>9}{'loss rel err':>14}"
    )
    for name, r in results["models"].items():
        for mode, t in r["step_ms"].items():
            print(
                f"{name:<18}{mode:<20}{t['median']:>15.3f}{t['min']:>9.3f}{t['max']:>9.3f}"
                f"{r['loss_rel_err'][mode]:>14.2e}"
            )


if __name__ == "__main__":
    main()
