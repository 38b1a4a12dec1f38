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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--example", default="mlp")
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--budget-s", type=float, default=4)
    p.add_argument("--max-trials", type=int, default=4)
    p.add_argument("--workers", type=int, default=2)
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
    report = {
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
        }
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
        print(json.dumps(summary))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
