"""Which `scaled_dot_product_attention` backend the attention rewrite should end in, host and GPU:
per backend (cuDNN, flash, memory-efficient), causal bf16 attention forward + backward at the
bench GPTs' shapes — the host's time to issue one call (GPU idle before it, so nothing blocks)
and the GPU's time (do_bench) — then a bench workload's whole step under kernelpro compiled with
only that backend allowed (Inductor's caches off, so each compile traces its own choice):
`do_bench` rounds and ten steps queued back to back (the host's steady rate).

PYTHONPATH=.:docs/gpu_runs/common python docs/gpu_runs/2026-11-26-host-path/gpu_sdpa_backends.py [--workload gpt2_small] [--no-steps]
    [--no-calls]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from scripts_common import mode_step  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from kernelpro_backend.bench.workloads import WORKLOADS  # noqa: E402

BACKENDS = {
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
}
SHAPES = {"gpt2_small": (8, 12, 1024, 64), "mini_gpt": (4, 8, 1024, 64)}


def attention_call(shape: tuple[int, int, int, int]):  # type: ignore[no-untyped-def]
    q, k, v = (
        torch.randn(*shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    grad = torch.randn(*shape, device="cuda", dtype=torch.bfloat16)

    def call() -> None:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(grad)

    return call


def host_us(call) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(60):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times[10:])


def queued_ms(step, n: int = 10) -> float:  # type: ignore[no-untyped-def]
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", default="gpt2_small")
    parser.add_argument("--no-steps", action="store_true")
    parser.add_argument("--no-calls", action="store_true")
    a = parser.parse_args()
    for name, shape in {} if a.no_calls else SHAPES.items():
        for label, backend in BACKENDS.items():
            with sdpa_kernel([backend]):
                call = attention_call(shape)
                try:
                    call()
                except RuntimeError as e:
                    print(f"{name} {shape} {label}: not available ({str(e)[:80]})")
                    continue
                gpu = do_bench(call, warmup=10, rep=100)
                host = host_us(call)
            print(
                f"{name} {shape} {label:<10} fwd+bwd GPU {gpu * 1e3:8.1f} us, host {host:7.1f} us"
            )
    if a.no_steps:
        return
    workload = WORKLOADS[a.workload](torch.device("cuda"), None, "full")
    steps = {"inductor": mode_step(workload, "inductor")}
    torch._dynamo.reset()
    steps["kernelpro"] = mode_step(workload, "kernelpro")  # no context: SDPA picks per call
    for label, backend in BACKENDS.items():
        with sdpa_kernel([backend]):  # the choice is traced into the compiled graph
            torch._dynamo.reset()
            try:
                steps[f"kernelpro-{label}"] = mode_step(workload, "kernelpro")
            except Exception as e:  # a backend that cannot run these shapes
                print(f"kernelpro-{label}: {type(e).__name__}: {str(e)[:100]}")
    results: dict[str, list[float]] = {k: [] for k in steps}
    queued: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(3):
        for label, step in steps.items():
            results[label].append(do_bench(step, warmup=25, rep=200, return_mode="median"))
            queued[label].append(queued_ms(step))
    for label in steps:
        print(
            f"{a.workload} {label:<20} do_bench {' / '.join(f'{t:.2f}' for t in results[label])}"
            f" ms; queued {' / '.join(f'{t:.2f}' for t in queued[label])} ms a step"
        )


if __name__ == "__main__":
    main()
