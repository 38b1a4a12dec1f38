"""Host time of one cuBLAS GEMM call launched on an idle GPU (after a synchronize), as the LM-head
op's first chunk GEMM is at the start of a step: F.linear on a slice or the whole hidden states,
mm into a preallocated buffer, after a Triton launch, after a large allocation, and a 4 KB
memset for scale. Medians over 30 calls (min). H100 figures: BENCHMARKS.md, "The tf32x3 form's
orientation, seeds from max-autotune, IEEE float32 tiles", the LM head.

    PYTHONPATH=.:docs/gpu_runs/common python docs/gpu_runs/2026-11-26-lm-head-prologue/gpu_lm_head_host_probe.py
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from kernelpro_backend.ops.linear_ce_rows import cross_entropy_rows


def host_us(fn: Callable[[], object], pre: Callable[[], object] | None = None, n: int = 30) -> str:
    """Median (min) host microseconds of `fn()` called on an idle GPU, `pre()` before each."""
    v = []
    for i in range(n + 5):
        if pre:
            pre()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        y = fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        del y
        if i >= 5:
            v.append((t1 - t0) * 1e6)
    v.sort()
    return f"{v[len(v) // 2]:.0f} us (min {v[0]:.0f})"


def main() -> int:
    torch.manual_seed(0)
    x = torch.randn(8192, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(32000, 1024, device="cuda", dtype=torch.bfloat16)
    t = torch.randint(0, 32000, (8192,), device="cuda")
    buf = torch.empty(4096, 32000, device="cuda", dtype=torch.bfloat16)
    cases: list[tuple[str, Callable[[], object], Callable[[], object] | None]] = [
        ("linear slice", lambda: F.linear(x[:4096], w), None),
        ("linear full", lambda: F.linear(x, w), None),
        ("mm out=", lambda: torch.mm(x[:4096], w.t(), out=buf), None),
        (
            "linear slice after a Triton launch",
            lambda: F.linear(x[:4096], w),
            lambda: cross_entropy_rows(buf[:16], t[:16], 1.0, -100, True),
        ),
        (
            "linear slice after 300 MB alloc/free",
            lambda: F.linear(x[:4096], w),
            lambda: torch.empty(300 << 20, device="cuda", dtype=torch.uint8),
        ),
        ("memset 4 KB", lambda: buf[:1, :1024].zero_(), None),
    ]
    for name, fn, pre in cases:
        print(name, host_us(fn, pre), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
