"""`kernelpro demo`: train a transformer block under the backend and compare it with eager and
Inductor, side by side in one process.

Owns: the demo's steps and printout. Must not: hold backend logic.
On a machine without a CUDA GPU it runs the block on the CPU (fallback only) and says that
kernel search needs a GPU.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from .. import examples
from ..backend import CompileSession, make_backend
from ..paths import shipped_cache_dir


def _step_fn(model: torch.nn.Module, compiled: Callable, x: torch.Tensor) -> Callable[[], float]:
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        loss = compiled(x).float().square().mean()
        loss.backward()
        opt.step()
        return float(loss.detach())

    return step


def _median_step_ms(
    steppers: dict[str, Callable[[], float]], steps: int, cuda: bool
) -> dict[str, float]:
    """Median step time per mode, in ms. The modes' steps are interleaved (one step of each in
    turn, after 3 warm-up steps each) so that clock, cache and allocator drift hit all alike:
    timed one after the other, the same code differed by 50% on the CPU."""
    for step in steppers.values():
        for _ in range(3):
            step()
    times: dict[str, list[float]] = {name: [] for name in steppers}
    for _ in range(steps):
        for name, step in steppers.items():
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            step()
            if cuda:
                torch.cuda.synchronize()
            times[name].append((time.perf_counter() - t0) * 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


def run_demo(steps: int = 20) -> int:
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    batch, seq = (8, 512) if cuda else (2, 16)
    print(f"kernelpro demo: transformer block, batch {batch}, seq {seq}, on {device}")
    if not cuda:
        print("No CUDA GPU here: kernel search needs one, so kernelpro runs its fallback only.")

    shipped = [str(d) for d in (shipped_cache_dir(),) if d is not None]
    # A short search per subgraph, so the demo ends in a few minutes on a GPU; the repository's
    # shipped kernels for this block are re-proved here and used.
    on_gpu: dict[str, Any] = {
        "search": "on-miss", "budget_s": 10, "max_trials": 8, "workers": 4,
        "extra_cache_dirs": shipped,
    }  # fmt: skip
    losses: dict[str, float] = {}
    sessions: list[CompileSession] = []
    modes: dict[str, Callable[[torch.nn.Module], Callable]] = {
        "eager": lambda m: m,
        "inductor": lambda m: torch.compile(m),
        "kernelpro": lambda m: torch.compile(
            m,
            backend=make_backend(sessions=sessions),
            options=on_gpu if cuda else {"search": "cache-only"},
        ),
    }
    steppers: dict[str, Callable[[], float]] = {}
    firsts: dict[str, float] = {}
    for name, wrap in modes.items():
        torch._dynamo.reset()
        model, (x,) = examples.transformer_block(device, batch=batch, seq=seq)
        steppers[name] = _step_fn(model, wrap(model), x)
        t0 = time.perf_counter()
        losses[name] = steppers[name]()
        firsts[name] = time.perf_counter() - t0
    results = _median_step_ms(steppers, steps, cuda)
    for name in modes:
        print(f"  {name:<10} first step {firsts[name]:6.1f} s   step {results[name]:8.2f} ms")

    found = sum(r.subgraphs for s in sessions for r in s.reports)
    replaced = sum(len(r.replaced) for s in sessions for r in s.reports)
    print(f"kernelpro found {found} subgraphs (forward + backward) and replaced {replaced}.")
    match = abs(losses["kernelpro"] - losses["eager"]) <= 1e-4 * max(1.0, abs(losses["eager"]))
    print(
        f"first-step loss: eager {losses['eager']:.6f}, kernelpro {losses['kernelpro']:.6f}"
        f" ({'match' if match else 'MISMATCH'})"
    )
    if replaced == 0:
        # Nothing replaced: kernelpro ran Inductor's own code, so any difference is noise.
        print(
            f"kernelpro replaced nothing, so it ran {'Inductor' if cuda else 'its fallback'}'s "
            f"own code: {results['kernelpro']:.2f} vs {results['inductor']:.2f} ms is not a "
            "kernelpro speedup (timing noise and compile-wrapper differences)."
        )
    else:
        print(
            f"speedup (steps interleaved, medians): {results['eager'] / results['kernelpro']:.2f}x "
            f"over eager, {results['inductor'] / results['kernelpro']:.2f}x over Inductor"
        )
    return 0 if match else 1
