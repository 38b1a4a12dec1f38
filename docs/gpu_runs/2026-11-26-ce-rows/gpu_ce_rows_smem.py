"""The cross-entropy row kernel with the row in shared memory (linear_ce_rows_cuda.py) against
the Triton kernel (linear_ce_rows.py) and a plain copy of the logits (one read, one write: the
ceiling), per chunk shape and dtype; `--one-per-sm` also runs it on rows too wide for two blocks
per SM (its rule sends those to Triton) to show why. Errors against the ATen twin.

PYTHONPATH=.:docs/gpu_runs/common python docs/gpu_runs/2026-11-26-ce-rows/gpu_ce_rows_smem.py [--shapes 4194x32000 ...] [--one-per-sm]
"""

from __future__ import annotations

import argparse
import functools

import torch
from triton.testing import do_bench

from kernelpro_backend.ops import linear_ce_rows_cuda as cuda_rows
from kernelpro_backend.ops.linear_ce_rows import REREAD_HINTS, _kernel, rows_aten

SHAPES = ("4194x32000", "3998x32000", "2048x32000", "2605x50304", "2048x65536")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES))
    parser.add_argument("--dtypes", nargs="*", default=["bfloat16", "float16"])
    parser.add_argument("--one-per-sm", action="store_true")
    a = parser.parse_args()
    if a.one_per_sm:
        cuda_rows.MIN_BLOCKS_PER_SM = 1
        cuda_rows._room.cache_clear()
    streamed = _kernel(False)
    print(f"{'rows x cols':<13}{'dtype':<10}{'variant':<24}{'ms':>8}{'TB/s':>7}{'max err':>10}")
    for shape in a.shapes:
        rows, cols = (int(v) for v in shape.split("x"))
        for dtype in (getattr(torch, d) for d in a.dtypes):
            src = (torch.randn(rows, cols, device="cuda") * 3).to(dtype)
            target = torch.randint(0, cols, (rows,), device="cuda")
            target[::7] = -100
            scale = 1.0 / rows
            ref = src.clone()
            ref_loss = rows_aten(ref, target, scale, -100, True)
            nbytes = 2 * src.numel() * src.element_size()
            work = src.clone()
            loss = torch.empty(rows, device="cuda")
            label = f"{shape:<13}{str(dtype).replace('torch.', ''):<10}"
            ms = do_bench(lambda: work.copy_(src), warmup=5, rep=50)  # noqa: B023
            print(f"{label}{'copy':<24}{ms:>8.3f}{nbytes / ms / 1e9:>7.2f}")
            args = (work, cols, target, loss, scale, cols, -100, True, 4096, *REREAD_HINTS)
            variants = {"triton (4096, 16 warps)": functools.partial(
                streamed[(rows,)], *args, num_warps=16)}  # fmt: skip
            why = cuda_rows.unavailable(work, target)
            if why is None:
                variants["shared memory"] = functools.partial(
                    cuda_rows.run, work, target, loss, scale, -100, True
                )
            else:
                print(f"{label}{'shared memory':<24} not run: {why}")
            for name, run in variants.items():
                work.copy_(src)
                run()
                torch.cuda.synchronize()
                err = max(
                    (work.float() - ref.float()).abs().max().item(),
                    (loss - ref_loss).abs().max().item(),
                )
                ms = do_bench(run, warmup=5, rep=50)
                print(f"{label}{name:<24}{ms:>8.3f}{nbytes / ms / 1e9:>7.2f}{err:>10.2e}")


if __name__ == "__main__":
    main()
