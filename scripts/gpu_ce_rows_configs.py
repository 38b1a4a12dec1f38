"""The cross-entropy row kernel of the chunked LM-head op (linear_ce_rows.py) over its launch
configurations on the GPU (BLOCK columns per step, num_warps, with and without the L2 eviction
hints of the re-read row), gradient written in place; effective bandwidth (one read + one write
of the logits) per config and chunk shape, beside Inductor's cross-entropy forward+backward on the same logits.

PYTHONPATH=. python scripts/gpu_ce_rows_configs.py
"""

from __future__ import annotations

import functools
import itertools

import torch
import torch.nn.functional as F
from triton.testing import do_bench

from kernelpro_backend.linear_ce_rows import REREAD_HINTS, _kernel

SHAPES = ((2097, 32000), (8192, 32000), (1337, 50257), (523, 128256))


def inductor_step(ce, x: torch.Tensor, target: torch.Tensor) -> None:  # type: ignore[no-untyped-def]
    x.grad = None
    ce(x, target).backward()


def main() -> None:
    kernel = _kernel(False)
    print(f"{'rows x cols':<14}{'config':<26}{'ms':>8}{'TB/s':>7}")
    for rows, cols in SHAPES:
        logits = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
        target = torch.randint(0, cols, (rows,), device="cuda")
        scale = 1.0 / rows
        loss = torch.empty(rows, device="cuda")
        nbytes = 2 * logits.numel() * logits.element_size()
        configs = [(b, w) for b in (2048, 4096, 8192) for w in (8, 16, 32)]
        args = (logits, cols, target, loss, scale, cols, -100, True)
        for (block, warps), hints in itertools.product(configs, (REREAD_HINTS, ("", ""))):
            name = f"BLOCK {block} w{warps}" + (" hints" if hints[0] else "")
            run = functools.partial(kernel[(rows,)], *args, block, *hints, num_warps=warps)
            try:
                ms = do_bench(run, warmup=5, rep=40)
            except Exception as e:  # out of resources: report and go on
                print(f"{rows}x{cols:<8}{name}: {type(e).__name__}")
                continue
            print(f"{rows}x{cols:<8}{name:<26}{ms:>8.3f}"
                  f"{nbytes / ms / 1e9:>7.2f}", flush=True)  # fmt: skip
        x = logits.clone().requires_grad_(True)
        ce = torch.compile(lambda v, t: F.cross_entropy(v.float(), t))
        ms = do_bench(functools.partial(inductor_step, ce, x, target), warmup=5, rep=40)
        print(f"{rows}x{cols:<8}{'inductor fwd+bwd':<26}{ms:>8.3f}{nbytes / ms / 1e9:>7.2f}")


if __name__ == "__main__":
    main()
