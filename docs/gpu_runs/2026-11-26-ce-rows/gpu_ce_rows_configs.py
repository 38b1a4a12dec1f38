"""The cross-entropy row kernel of the chunked LM-head op (linear_ce_rows.py) over its launch
configurations on the GPU (BLOCK columns per step, num_warps, with and without the L2 eviction
hints of the re-read row), gradient written in place; effective bandwidth (one read + one write
of the logits) per config and chunk shape, beside Inductor's cross-entropy forward+backward on the same logits.

`--store` adds the gradient's stores with an L2 eviction policy (evict_first: the written
gradient should not push the rows the second pass re-reads out of L2); `copy` is one read and one
write of the same logits by `Tensor.copy_` (the ceiling).

PYTHONPATH=.:docs/gpu_runs/common python docs/gpu_runs/2026-11-26-ce-rows/gpu_ce_rows_configs.py [--shapes 4194x32000 ...] [--store evict_first]
    [--blocks 4096 8192] [--warps 16 32]
"""

from __future__ import annotations

import argparse
import functools
import itertools

import torch
import torch.nn.functional as F
from triton.testing import do_bench

from kernelpro_backend.ops.linear_ce_rows import REREAD_HINTS, _kernel

SHAPES = ((2097, 32000), (8192, 32000), (1337, 50257), (523, 128256))


def inductor_step(ce, x: torch.Tensor, target: torch.Tensor) -> None:  # type: ignore[no-untyped-def]
    x.grad = None
    ce(x, target).backward()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", nargs="*", default=[f"{r}x{c}" for r, c in SHAPES])
    parser.add_argument("--store", nargs="*", default=[""])
    parser.add_argument("--blocks", nargs="*", type=int, default=[2048, 4096, 8192])
    parser.add_argument("--warps", nargs="*", type=int, default=[8, 16, 32])
    parser.add_argument("--no-inductor", action="store_true")
    a = parser.parse_args()
    kernel = _kernel(False)
    print(f"{'rows x cols':<14}{'config':<34}{'ms':>8}{'TB/s':>7}")
    for rows, cols in (tuple(int(v) for v in shape.split("x")) for shape in a.shapes):
        logits = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
        target = torch.randint(0, cols, (rows,), device="cuda")
        scale = 1.0 / rows
        loss = torch.empty(rows, device="cuda")
        nbytes = 2 * logits.numel() * logits.element_size()
        configs = [(b, w) for b in a.blocks for w in a.warps]
        args = (logits, cols, target, loss, scale, cols, -100, True)
        copy = torch.empty_like(logits)
        ms = do_bench(lambda: copy.copy_(logits), warmup=5, rep=40)  # noqa: B023
        print(f"{rows}x{cols:<8}{'copy':<34}{ms:>8.3f}{nbytes / ms / 1e9:>7.2f}", flush=True)
        variants = itertools.product(configs, (REREAD_HINTS, ("", "")), a.store)
        for (block, warps), hints, store in variants:
            name = f"BLOCK {block} w{warps}" + (" hints" if hints[0] else "")
            name += f" store {store}" if store else ""
            launch = kernel[(rows,)]
            run = functools.partial(launch, *args, block, *hints, store, num_warps=warps)
            try:
                ms = do_bench(run, warmup=5, rep=40)
            except Exception as e:  # out of resources: report and go on
                print(f"{rows}x{cols:<8}{name}: {type(e).__name__}")
                continue
            print(f"{rows}x{cols:<8}{name:<34}{ms:>8.3f}"
                  f"{nbytes / ms / 1e9:>7.2f}", flush=True)  # fmt: skip
        if a.no_inductor:
            continue
        x = logits.clone().requires_grad_(True)
        ce = torch.compile(lambda v, t: F.cross_entropy(v.float(), t))
        ms = do_bench(functools.partial(inductor_step, ce, x, target), warmup=5, rep=40)
        print(f"{rows}x{cols:<8}{'inductor fwd+bwd':<34}{ms:>8.3f}{nbytes / ms / 1e9:>7.2f}")


if __name__ == "__main__":
    main()
