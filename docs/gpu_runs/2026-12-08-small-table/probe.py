"""Probe: a small table's gradient (embedding backward into few rows) as kernelpro's one-hot
GEMM against Inductor's atomics.

Why: Inductor's profile of HF T5-base (H100, 2026-12-07) showed its position-bias gradient,
1024 x 1024 x 12 values added into 32 x 12 addresses with atomics, at about 5 ms of an 84 ms
step. fx_passes/small_table_grads.py rewrites such accumulates into a batched one-hot GEMM.

Per case, `(embedding(index, weight) * grad).sum()` forward and backward, compiled by Inductor
and by kernelpro (NullProvider: no kernels, only the graph passes), eager beside them; gradients
checked against the float64 sum; CUDA-event times of interleaved rounds (median).

    OUT=/tmp/out python docs/gpu_runs/2026-12-08-small-table/probe.py
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F

from kernelpro_backend import make_backend
from kernelpro_backend.fx_passes.small_table_grads import NAME
from kernelpro_backend.rewrite.providers import NullProvider

ROUNDS = int(os.environ.get("PROBE_ROUNDS", "7"))
# name: (rows, width, index shape, bucketed positions)
CASES = {
    "t5 encoder position bias 32x12, 1024x1024": (32, 12, (1024, 1024), True),
    "t5 decoder position bias 32x12, 256x256": (32, 12, (256, 256), True),
    "bert token types 2x768, 32x512": (2, 768, (32, 512), False),
}


def step(weight: torch.Tensor, index: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    return (F.embedding(index, weight) * grad).sum()


def inputs(rows: int, width: int, shape: tuple[int, int], buckets: bool, dtype: torch.dtype):
    if buckets:
        pos = torch.arange(shape[0], device="cuda")
        index = (pos[None, :] - pos[:, None]).clamp(-16, 15) + 16
        grad = torch.randn(width, *shape, device="cuda", dtype=dtype).permute(1, 2, 0)
    else:
        index = torch.randint(0, rows, shape, device="cuda")
        grad = torch.randn(*shape, width, device="cuda", dtype=dtype)
    weight = torch.randn(rows, width, device="cuda", dtype=dtype, requires_grad=True)
    return weight, index, grad


def timed(fn, args, reps: int = 20) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn(*args).backward()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def main() -> None:
    out = Path(os.environ.get("OUT", "."))
    rows_out: list[dict] = []
    for name, (rows, width, shape, buckets) in CASES.items():
        for dtype in (torch.float32, torch.bfloat16):
            weight, index, grad = inputs(rows, width, shape, buckets, dtype)
            exact = torch.zeros(rows, width, device="cuda", dtype=torch.float64)
            exact.index_add_(0, index.reshape(-1), grad.reshape(-1, width).double())
            sessions: list = []
            torch._dynamo.reset()
            fns = {
                "eager": step,
                "inductor": torch.compile(step, backend="inductor"),
                "kernelpro": torch.compile(
                    step, backend=make_backend(provider=NullProvider(), sessions=sessions)
                ),
            }
            errors = {}
            for mode, fn in fns.items():
                weight.grad = None
                fn(weight, index, grad).backward()
                errors[mode] = float((weight.grad.double() - exact).norm() / exact.norm())
            made = sum(s.rewrites.get(NAME, 0) for s in sessions)
            times: dict[str, list[float]] = {m: [] for m in fns}
            for _ in range(ROUNDS):
                for mode, fn in fns.items():
                    times[mode].append(timed(fn, (weight, index, grad)))
            row = dict(
                case=name, dtype=str(dtype).removeprefix("torch."), rewrites=made,
                errors=errors, ms={m: statistics.median(t) for m, t in times.items()}, rounds=times,
            )  # fmt: skip
            rows_out.append(row)
            (out / "small_table.json").write_text(json.dumps(rows_out, indent=1))
            print(row["case"], row["dtype"], "rewrites", made, "errors", errors, flush=True)
    print(f"\n{'case':44} {'dtype':9} {'eager':>8} {'inductor':>9} {'kernelpro':>9} {'x Ind':>6}")
    for r in rows_out:
        ms = r["ms"]
        print(
            f"{r['case']:44} {r['dtype']:9} {ms['eager']:8.3f} {ms['inductor']:9.3f} "
            f"{ms['kernelpro']:9.3f} {ms['inductor'] / ms['kernelpro']:6.2f}"
        )


if __name__ == "__main__":
    main()
