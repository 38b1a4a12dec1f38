"""The LM-head op's host path, A/B in one process, calls interleaved: per call (eager,
synchronized before each) the op as it was (its loss finished by the Triton kernel: "old"), as
it is (finished by the CUDA row kernel's last block: "new"), and its twin without an autograd
kernel ("inner", what compiled graphs call); then `mini_gpt`'s training step under Inductor,
kernelpro with the old and the new finish, and kernelpro without the LM-head rewrite, one step
of each in turn (synchronized: host ms and step ms), and in rounds of 10 free-running steps.

    PYTHONPATH=.:docs/gpu_runs/common python docs/gpu_runs/2026-11-27-mini-gpt-launch-path/gpu_lm_op_ab.py [steps]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import torch

from kernelpro_backend.bench.modes import ensure_kernelpro_registered, make_modes
from kernelpro_backend.bench.workloads import WORKLOADS
from kernelpro_backend.ops import linear_ce as linear_ce_op  # noqa: F401  (registers the ops)
from kernelpro_backend.ops import linear_ce_rows_cuda as rows_cuda

_COUNTER = rows_cuda.counter
VARIANTS = ("old", "new", "inner")


def use(variant: str) -> None:
    """ "old": no counter, so the Triton kernel finishes the loss, as before 30fb74f."""
    rows_cuda.counter = _COUNTER if variant != "old" else (lambda *a: None)  # type: ignore[assignment]


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def per_call() -> None:
    ops = torch.ops.kernelpro
    for rows, width, vocab in ((64, 512, 1024), (4096, 512, 32768)):
        bf16 = {"device": "cuda", "dtype": torch.bfloat16}
        x, w = torch.randn(rows, width, **bf16), torch.randn(vocab, width, **bf16) * 0.02
        t = torch.randint(0, vocab, (rows,), device="cuda")
        args = (x, w, None, t, -100, "mean", False, True, True, False)
        took: dict[str, list[float]] = {v: [] for v in VARIANTS}
        losses = {}
        for i in range(2000 if rows == 64 else 600):
            v = VARIANTS[i % 3]
            use(v)
            op = ops.linear_cross_entropy_inner if v == "inner" else ops.linear_cross_entropy
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = op(*args)
            t1 = time.perf_counter()
            if i >= 40:
                took[v].append((t1 - t0) * 1e6)
            losses[v] = round(out[0].float().item(), 5)
        line = "  ".join(f"{v} {median(took[v]):.1f}" for v in VARIANTS)
        print(f"op {rows}x{width}->{vocab} host µs median: {line}  losses {losses}")


def mini_gpt_steps(count: int) -> None:
    ensure_kernelpro_registered()
    work = WORKLOADS["mini_gpt"](torch.device("cuda"), None, "full")

    def build(mode: str, options: dict | None = None) -> Callable[[], None]:  # type: ignore[type-arg]
        (found,) = [m for m in make_modes([mode], options) if m.name == mode]
        model = work.fresh_model()
        fn = found.wrap(model, None)
        opt = work.make_optimizer(model.parameters())  # type: ignore[misc]

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            work.loss_fn(fn(*work.inputs)).backward()  # type: ignore[misc]
            opt.step()

        for _ in range(3):
            step()
        return step

    steps = {"inductor": build("inductor")}
    torch._dynamo.reset()
    steps["kp"] = build("kernelpro")
    torch._dynamo.reset()
    steps["kp-no-lm"] = build("kernelpro", {"rewrite_linear_cross_entropy": False})
    order = [("inductor", ""), ("kp", "old"), ("kp", "new"), ("kp-no-lm", "")]
    host: dict[tuple[str, str], list[float]] = {o: [] for o in order}
    total: dict[tuple[str, str], list[float]] = {o: [] for o in order}
    for i in range(count):
        o = order[i % len(order)]
        use(o[1] or "new")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        steps[o[0]]()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        if i >= 20:
            host[o].append((t1 - t0) * 1e3)
            total[o].append((time.perf_counter() - t0) * 1e3)
    print("mini_gpt per-step alternation (synchronized steps): host ms / step ms, median")
    for o in order:
        print(f"  {o[0]:9s} {o[1]:4s} host {median(host[o]):.3f}  step {median(total[o]):.3f}")
    rounds: dict[tuple[str, str], list[float]] = {o: [] for o in order}
    for i in range(160):
        o = order[i % len(order)]
        use(o[1] or "new")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(10):
            steps[o[0]]()
        torch.cuda.synchronize()
        rounds[o].append((time.perf_counter() - t0) / 10 * 1e3)
    print("free-running 10-step rounds, alternating: median ms/step")
    for o in order:
        print(f"  {o[0]:9s} {o[1]:4s} {median(rounds[o]):.3f}")


if __name__ == "__main__":
    per_call()
    mini_gpt_steps(int(sys.argv[1]) if len(sys.argv) > 1 else 400)
