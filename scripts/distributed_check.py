"""DDP training with `backend="kernelpro"` and search on a miss, one rank of several.

    torchrun --nproc-per-node 2 scripts/distributed_check.py --example mlp --out DIR

Each rank trains the example for `--steps` SGD steps twice from the same weights: under DDP
alone (the reference) and under DDP with torch.compile(backend="kernelpro",
search="on-miss"), its misses split across the ranks and the winners shared
(tuner/distributed.py). It writes DIR/rank<R>.json: both loss curves, the kernels that replaced
subgraphs, the subgraphs found, wall times. Rank 0 then prints whether every rank installed the
same kernels and whether the losses match the reference. The process group is gloo (on one GPU
two ranks cannot share it under NCCL; the kernel exchange always uses its own gloo group).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from kernelpro_backend import examples, make_backend
from kernelpro_backend.backend import CompileSession


def _train(model: torch.nn.Module, fn, x: torch.Tensor, steps: int) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = fn(x).float().square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _median_step_ms(fn, x: torch.Tensor, params, steps: int) -> float:
    """Median of `steps` timed training steps (CUDA events), after two untimed ones."""
    opt = torch.optim.SGD(params, lr=0.0)
    times = []
    for i in range(steps + 2):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        opt.zero_grad()
        fn(x).float().square().mean().backward()
        opt.step()
        end.record()
        torch.cuda.synchronize()
        if i >= 2:
            times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def _step_times(args, model, compiled, x: torch.Tensor) -> dict:
    """DDP eager and DDP + Inductor beside DDP + kernelpro (after its search: cache hits),
    interleaved."""
    twin, _ = examples.EXAMPLES[args.example]("cuda")
    twin.load_state_dict(model.state_dict())
    inductor = torch.compile(DDP(twin))
    plain, _ = examples.EXAMPLES[args.example]("cuda")
    plain.load_state_dict(model.state_dict())
    eager = DDP(plain)
    found: dict[str, list[float]] = {"eager_ms": [], "inductor_ms": [], "kernelpro_ms": []}
    for _ in range(3):
        found["eager_ms"].append(_median_step_ms(eager, x, plain.parameters(), args.time_steps))
        found["inductor_ms"].append(
            _median_step_ms(inductor, x, twin.parameters(), args.time_steps)
        )
        found["kernelpro_ms"].append(
            _median_step_ms(compiled, x, model.parameters(), args.time_steps)
        )
    return {k: sorted(v)[1] for k, v in found.items()} | {"rounds": found}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--example", default="mlp")
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--budget-s", type=float, default=4)
    p.add_argument("--max-trials", type=int, default=4)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument(
        "--time-steps", type=int, default=0,
        help="then time this many steps of DDP + Inductor and DDP + kernelpro (its cache now warm)",
    )  # fmt: skip
    args = p.parse_args()
    dist.init_process_group(backend=os.environ.get("KERNELPRO_CHECK_PG", "gloo"))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    ref_model, (x,) = examples.EXAMPLES[args.example]("cuda")
    model, _ = examples.EXAMPLES[args.example]("cuda")
    model.load_state_dict(ref_model.state_dict())
    ref = DDP(ref_model)
    t0 = time.perf_counter()
    ref_losses = _train(ref_model, ref, x, args.steps)
    ref_s = time.perf_counter() - t0

    sessions: list[CompileSession] = []
    options = {
        "search": "on-miss", "budget_s": args.budget_s, "max_trials": args.max_trials,
        "workers": args.workers, "cache_dir": str(out / f"cache{rank}"), "progress": False,
    }  # fmt: skip
    ddp = DDP(model)
    compiled = torch.compile(ddp, backend=make_backend(sessions=sessions), options=options)
    t0 = time.perf_counter()
    losses = _train(model, compiled, x, args.steps)
    kp_s = time.perf_counter() - t0
    timed = _step_times(args, model, compiled, x) if args.time_steps else {}
    report = {
        **timed,
        "rank": rank,
        "world": world,
        "device": torch.cuda.get_device_name(),
        "ref_losses": ref_losses,
        "losses": losses,
        "replaced": sorted(k for s in sessions for r in s.reports for k in r.replaced),
        "subgraphs": sum(r.subgraphs for s in sessions for r in s.reports),
        "ref_s": round(ref_s, 2),
        "kernelpro_s": round(kp_s, 2),
    }
    (out / f"rank{rank}.json").write_text(json.dumps(report, indent=1))
    dist.barrier()
    if rank == 0:
        reports = [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]
        same = all(r["replaced"] == reports[0]["replaced"] for r in reports)
        match = all(
            abs(a - b) <= 1e-4 * max(1.0, abs(b))
            for r in reports
            for a, b in zip(r["losses"], r["ref_losses"], strict=True)
        )
        summary = {
            "ranks": world,
            "same_kernels_on_every_rank": same,
            "losses_match_ddp_without_kernelpro": match,
            "kernels": len(reports[0]["replaced"]),
            "subgraphs": reports[0]["subgraphs"],
            "first_steps_s": [r["kernelpro_s"] for r in reports],
            "step_ms": {
                k: [r.get(k) for r in reports] for k in ("eager_ms", "inductor_ms", "kernelpro_ms")
            },
        }
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
        print(json.dumps(summary))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
