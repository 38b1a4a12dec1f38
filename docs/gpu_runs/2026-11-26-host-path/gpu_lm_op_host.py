"""Where the LM-head op's host time goes: per call of `kernelpro::linear_cross_entropy`, of
the same body registered as a `torch.library.custom_op`, and of each of its parts on shapes so small that the GPU waits for the host (µs of host per call, many
calls back to back, one synchronize), then a training step of a bench workload under cProfile
(the Python functions by own time), with and without the LM-head rewrite.

    PYTHONPATH=.:docs/gpu_runs/common python docs/gpu_runs/2026-11-26-host-path/gpu_lm_op_host.py [--workload mini_gpt] [--steps 20]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from scripts_common import mode_step

from kernelpro_backend.bench.workloads import WORKLOADS
from kernelpro_backend.ops import linear_ce as op
from kernelpro_backend.ops import linear_ce_rows_cuda as cuda_rows
from kernelpro_backend.ops.linear_ce_rows import REREAD_HINTS, _kernel, cross_entropy_rows, finish


def host_us(fn: Callable[[], object], calls: int = 300) -> float:
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def parts() -> dict[str, Callable[[], object]]:
    rows, width, vocab = 64, 512, 1024
    bf16 = dict(device="cuda", dtype=torch.bfloat16)
    x = torch.randn(rows, width, **bf16, requires_grad=True)  # type: ignore[arg-type]
    w = torch.randn(vocab, width, **bf16, requires_grad=True)  # type: ignore[arg-type]
    t = torch.randint(0, vocab, (rows,), device="cuda")
    logits = torch.randn(rows, vocab, **bf16)  # type: ignore[arg-type]
    losses = torch.rand(rows, device="cuda")
    plain = (x.detach(), w.detach(), None, t, -100, "mean", False, True, True, False)
    body = getattr(op.linear_cross_entropy, "_init_fn", None)
    triton_rows = _kernel(False)

    def with_autograd() -> None:
        out = op.linear_cross_entropy(x, w, None, t, -100, "mean", False, True, True, False)
        out[0].backward()

    def eager() -> None:
        F.cross_entropy(F.linear(x, w).float(), t).backward()

    found = {
        "op, torch.ops, no grad": lambda: torch.ops.kernelpro.linear_cross_entropy(*plain),
        "op + backward (autograd)": with_autograd,
        "eager linear + cross-entropy + backward": eager,
        "F.linear": lambda: F.linear(plain[0], plain[1]),
        "cross_entropy_rows (dispatch + its kernel)": lambda: cross_entropy_rows(
            logits, t, 0.1, -100, True
        ),
        "the CUDA row kernel alone (run)": lambda: cuda_rows.run(
            logits, t, losses, 0.1, -100, True
        ),
        "the Triton row kernel alone (launch)": lambda: triton_rows[(rows,)](
            logits, vocab, t, losses, 0.1, vocab, -100, True, 1024, *REREAD_HINTS, num_warps=4
        ),
        "finish (Triton)": lambda: finish(losses, t, -100, True, torch.bfloat16),
        "torch.empty_like(weight)": lambda: torch.empty_like(plain[1]),
    }
    if body is not None:
        found["op body, no dispatch"] = lambda: body(*plain)
        old = _as_custom_op(body)
        found["the body as a torch.library.custom_op"] = lambda: old(*plain)
    return found


def _as_custom_op(body: Callable[..., object]) -> Callable[..., object]:
    """The same body registered as kernelpro registered its ops before fast_op.py."""
    return torch.library.custom_op("kernelpro_probe::linear_cross_entropy", mutates_args=())(body)


def profile_step(name: str, steps: int) -> None:
    workload = WORKLOADS[name](torch.device("cuda"), None, "full")
    for label, extra in (("kernelpro", {}), ("no-lm-op", {"rewrite_linear_cross_entropy": False})):
        torch._dynamo.reset()
        step = mode_step(workload, "kernelpro", extra)
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        for _ in range(steps):
            step()
        prof.disable()
        host = (time.perf_counter() - t0) / steps * 1e3
        torch.cuda.synchronize()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(30)
        print(f"=== {name} {label}: {host:.3f} ms of host per step under cProfile")
        print("\n".join(text.getvalue().splitlines()[6:40]), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="mini_gpt")
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    for label, fn in parts().items():
        print(f"{label:42s} {host_us(fn):8.1f} us of host per call", flush=True)
    profile_step(a.workload, a.steps)


if __name__ == "__main__":
    main()
