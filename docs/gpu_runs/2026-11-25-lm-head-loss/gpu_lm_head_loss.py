"""LM head + cross-entropy training step on the GPU (8192 tokens x 1024 -> 32000, bf16): eager,
Inductor and kernelpro with the chunked linear+cross-entropy rewrite; step time and peak memory,
each mode twice. `--variants` also times the fused op's chunk sizes
(kernelpro_backend.ops.linear_ce.CHUNK_ELEMENTS) before a last Inductor run, and `--profile`
prints the CUDA kernels of one step per mode (and writes its trace under $OUT).

PYTHONPATH=.:docs/gpu_runs/common python docs/gpu_runs/2026-11-25-lm-head-loss/gpu_lm_head_loss.py [--variants [--chunks 27 28] [--rounds 3]]
    [--profile] [--host] [--frozen-hidden]
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from scripts_common import measure_step

import kernelpro_backend.ops.linear_ce as op
from kernelpro_backend import make_backend
from kernelpro_backend.bench import models

N, D, V = 8192, 1024, 32000


def make_step(base: torch.nn.Module, mode: str, h: torch.Tensor, t: torch.Tensor):  # type: ignore[no-untyped-def]
    torch._dynamo.reset()
    model = models.LMHeadLoss(D, V).cuda().bfloat16()
    model.load_state_dict(base.state_dict())
    options = {"progress": False, "rewrite_linear_cross_entropy": True}
    if mode == "inductor":
        fn = torch.compile(model)
    elif mode == "kernelpro":
        fn = torch.compile(model, backend=make_backend(), options=options)
    else:
        fn = model

    def step() -> torch.Tensor:
        h.grad = None
        model.zero_grad(set_to_none=True)
        loss = fn(h, t)
        loss.backward()
        return loss

    return step


def profile(step, label: str) -> None:  # type: ignore[no-untyped-def]
    step()
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        step()
        torch.cuda.synchronize()
    print(f"--- {label}\n" + prof.key_averages().table(sort_by="cuda_time_total", row_limit=14))
    if os.environ.get("OUT"):  # the timeline: where the GPU waits for the host
        prof.export_chrome_trace(os.path.join(os.environ["OUT"], f"trace-{label}.json"))


def host_times(step, repeats: int = 20) -> str:  # type: ignore[no-untyped-def]
    """Without the profiler: the host's time in the step's call (forward and backward launched,
    GPU idle at the start), the whole step, and the op's GEMM calls (host time of each)."""
    calls: list[float] = []
    real = op._logits

    def timed(*args):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        out = real(*args)
        calls.append((time.perf_counter() - t0) * 1e6)
        return out

    op._logits = timed
    host, whole, first = [], [], []
    try:
        for i in range(repeats + 3):
            torch.cuda.synchronize()
            calls.clear()
            t0 = time.perf_counter()
            step()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            if i >= 3:
                host.append((t1 - t0) * 1e3)
                whole.append((time.perf_counter() - t0) * 1e3)
                first.extend(calls[:1])
    finally:
        op._logits = real
    med = lambda v: sorted(v)[len(v) // 2] if v else float("nan")  # noqa: E731
    return (
        f"host {med(host):.3f} ms of a {med(whole):.3f} ms step; the op's first GEMM call "
        f"{med(first):.0f} us on the host"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variants", action="store_true")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--chunk-elements", type=int, help="the op's CHUNK_ELEMENTS for every run")
    p.add_argument("--host", action="store_true", help="host time per step, no profiler")
    p.add_argument("--chunks", type=int, nargs="+", default=[26, 27, 28], help="log2 of chunks")
    p.add_argument("--rounds", type=int, default=1, help="rounds of the variants, Inductor in each")
    p.add_argument("--frozen-hidden", action="store_true", help="hidden states without grad")
    a = p.parse_args()
    if a.chunk_elements:
        op.CHUNK_ELEMENTS = a.chunk_elements
    torch.manual_seed(0)
    base = models.LMHeadLoss(D, V).cuda().bfloat16()
    h = torch.randn(N, D, device="cuda", dtype=torch.bfloat16, requires_grad=not a.frozen_hidden)
    t = torch.randint(0, V, (N,), device="cuda")
    for mode in ("eager", "inductor", "kernelpro") * 2:
        step = make_step(base, mode, h, t)
        print(mode, measure_step(step), flush=True)
        if a.profile and mode != "eager":
            profile(step, mode)
    if a.host:
        for mode in ("inductor", "kernelpro") * 2:
            print(mode, host_times(make_step(base, mode, h, t)), flush=True)
    if not a.variants:
        return
    for _ in range(a.rounds):
        for log2 in a.chunks:
            op.CHUNK_ELEMENTS = 2**log2
            step = make_step(base, "kernelpro", h, t)
            print(f"kernelpro chunk 2**{log2}", measure_step(step), flush=True)
        print("inductor", measure_step(make_step(base, "inductor", h, t)), flush=True)


if __name__ == "__main__":
    main()
