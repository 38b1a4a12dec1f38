"""The dynamic-shape bench: training loops whose shapes change, as real loops do.

A schedule is a model and the inputs of each step: sequence lengths that vary (padding to the
longest of each batch), a batch that varies, a short last batch. Each mode trains the same
schedule from the same weights under one `torch.compile`: the first shape compiles static,
the first change recompiles with symbolic sizes (torch.compile's `automatic_dynamic_shapes`),
and from then on kernelpro serves each size through its shape dispatchers (rewrite/dispatch.py). The
first pass over the schedule compiles; timed rounds follow (a warm-up over the same shapes,
`python -m kernelpro_backend.cli.sweeps shapes`, fills kernelpro's cache before). Reported per mode: step time per shape, the
compiles dynamo made (a recompilation storm shows here), peak memory, and for kernelpro the
share of symbolic-subgraph calls served by a kernel, the subgraphs replaced, dispatched or left
to the fallback.

Owns: `SCHEDULES`, `run_schedule`, its rows and table.
Must not: search by itself (warmup/offline.py does) or decide what kernels run (the backend does).
"""

from __future__ import annotations

import copy
import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn as nn

from ..backend import CompileSession, make_backend
from ..rewrite.dispatch import dispatch_stats
from ..rewrite.providers import KernelProvider
from . import models

Inputs = tuple[Any, ...]


@dataclasses.dataclass
class Schedule:
    name: str
    model: nn.Module
    steps: list[Inputs]  # the inputs of each step, in order
    dtype: torch.dtype

    def label(self, inputs: Inputs) -> str:
        return ",".join("x".join(map(str, x.shape)) for x in inputs if isinstance(x, torch.Tensor))


def mini_gpt_lengths(device: torch.device, tiny: bool) -> Schedule:
    """HandwrittenGPT (4 layers, width 512, vocab 32768, bf16) over 6 sequence lengths from
    256 to 2048 and a short last batch; tiny: a toy of the same shape changes."""
    b, d, h, layers, vocab = (2, 32, 2, 1, 128) if tiny else (4, 512, 8, 4, 32768)
    lengths = [16, 24, 32, 20, 40, 28] if tiny else [256, 512, 768, 1024, 1536, 2048]
    dtype = torch.float32 if tiny or device.type != "cuda" else torch.bfloat16
    torch.manual_seed(0)
    model = models.HandwrittenGPT(vocab, d, h, layers, max(lengths)).to(device, dtype)
    gen = torch.Generator(device="cpu").manual_seed(1)

    def batch(n: int, t: int) -> Inputs:
        ids = torch.randint(0, vocab, (n, t), generator=gen).to(device)
        return ids, torch.randint(0, vocab, (n, t), generator=gen).to(device)

    steps = [batch(b, t) for t in lengths] + [batch(1, lengths[-1])]
    return Schedule("mini_gpt_lengths", model, steps, dtype)


def lm_head_tokens(device: torch.device, tiny: bool) -> Schedule:
    """The LM head and its loss (width 1024, vocab 32000, bf16) over a token count that varies
    per step (8192 down to 1000, as packed batches do); tiny: a toy."""
    d, vocab = (32, 300) if tiny else (1024, 32000)
    tokens = [16, 12, 20, 9, 16] if tiny else [8192, 6144, 4096, 7000, 2048, 1000]
    dtype = torch.float32 if tiny or device.type != "cuda" else torch.bfloat16
    torch.manual_seed(0)
    model = models.LMHeadLoss(d, vocab).to(device, dtype)
    gen = torch.Generator(device="cpu").manual_seed(1)
    steps = [
        (
            torch.randn(n, d, generator=gen).to(device, dtype),
            torch.randint(0, vocab, (n,), generator=gen).to(device),
        )
        for n in tokens
    ]
    return Schedule("lm_head_tokens", model, steps, dtype)


SCHEDULES: dict[str, Callable[[torch.device, bool], Schedule]] = {
    "mini_gpt_lengths": mini_gpt_lengths,
    "lm_head_tokens": lm_head_tokens,
}


@dataclasses.dataclass
class ModeRow:
    schedule: str
    mode: str
    step_ms: dict[str, float]  # median per step shape (label)
    pass_ms: float  # one pass over the schedule, median over rounds
    compiles: int  # graphs dynamo compiled during the first pass
    first_pass_s: float  # the first pass: compiles (and run-time searches) included
    peak_mib: float
    losses: list[float]  # first pass, per step
    served: dict[str, int] = dataclasses.field(default_factory=dict)  # kernelpro only
    pass_spread_ms: float = 0.0  # max - min over the timed rounds
    recompiles_timed: int = 0  # compiles during the timed rounds (should be 0)


class _Mode:
    """One mode's compiled model and optimizer over the schedule."""

    def __init__(self, schedule: Schedule, mode: str, compile_fn: Callable[[nn.Module], Any]):
        self.mode = mode
        self.model = copy.deepcopy(schedule.model)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, foreach=True)
        self.fn = compile_fn(self.model)

    def step(self, inputs: Inputs) -> float:
        self.opt.zero_grad(set_to_none=True)
        loss = self.fn(*inputs)
        loss.backward()
        self.opt.step()
        return float(loss.detach())


def run_schedule(
    schedule: Schedule,
    modes: Sequence[str] = ("eager", "inductor", "kernelpro"),
    rounds: int = 3,
    options: dict[str, Any] | None = None,
    provider: KernelProvider | None = None,
) -> list[ModeRow]:
    """Train `schedule` under each mode: a first pass (compiles), then `rounds` timed passes.
    `options`: kernelpro's (default cache-only)."""
    sessions: list[CompileSession] = []
    opts = {"search": "cache-only", "progress": False, **(options or {})}
    backend = make_backend(provider=provider, sessions=sessions)
    compilers: dict[str, Callable[[nn.Module], Any]] = {
        "eager": lambda m: m,
        "inductor": lambda m: torch.compile(m),
        "kernelpro": lambda m: torch.compile(m, backend=backend, options=opts),
    }
    # Without dynamo's profile-guided state (a local file of the dims that changed in earlier
    # runs), so that every mode starts static and recompiles at the first change, as the
    # first run of a training script does; a mode after another would otherwise start dynamic.
    pgo = "automatic_dynamic_local_pgo"
    patch = {pgo: False} if hasattr(torch._dynamo.config, pgo) else {}
    with torch._dynamo.config.patch(patch):
        return [_run_mode(schedule, mode, compilers[mode], rounds, sessions) for mode in modes]


def _run_mode(
    schedule: Schedule,
    mode: str,
    compile_fn: Callable[[nn.Module], Any],
    rounds: int,
    sessions: list[CompileSession],
) -> ModeRow:
    device = next(schedule.model.parameters()).device
    # Modes one after the other, each from a reset: dynamo keeps its compiled code and its
    # "this dim changed, make it dynamic" state per code object, shared by every copy of
    # the model, so a reset between interleaved modes would recompile the earlier ones and
    # a mode after another would start out dynamic.
    torch._dynamo.reset()
    # Each mode its own copies of the inputs: dynamo marks the tensors it saw change size
    # (`_dynamo_weak_dynamic_indices`), and a mode given them would start out dynamic.
    steps = [tuple(_copy(x) for x in inputs) for inputs in schedule.steps]
    before = _compiles()
    runner = _Mode(schedule, mode, compile_fn)
    _reset_peak(device)
    t0 = time.perf_counter()
    losses = [runner.step(inputs) for inputs in steps]
    _sync(device)
    row = ModeRow(
        schedule.name, mode, {}, 0.0, _compiles() - before, time.perf_counter() - t0,
        _peak_mib(device), losses,
    )  # fmt: skip
    served_before = dispatch_stats()
    times: dict[str, list[float]] = {}
    passes = []
    for _ in range(rounds):
        total = 0.0
        for inputs in steps:
            ms = _timed(runner, inputs, device)
            times.setdefault(schedule.label(inputs), []).append(ms)
            total += ms
        passes.append(total)
    row.step_ms = {k: statistics.median(v) for k, v in times.items()}
    row.pass_ms = statistics.median(passes)
    row.pass_spread_ms = max(passes) - min(passes)
    row.recompiles_timed = _compiles() - before - row.compiles
    if mode == "kernelpro":
        row.served = _served(sessions, served_before, dispatch_stats())
    return row


def _served(
    sessions: list[CompileSession], before: dict[str, int], after: dict[str, int]
) -> dict[str, int]:
    reports = [r for s in sessions for r in s.reports]
    return {
        "static_replaced": sum(len(r.replaced) - len(r.dispatched) for r in reports),
        "dispatched": sum(len(r.dispatched) for r in reports),
        "symbolic_on_fallback": sum(r.symbolic for r in reports),
        "subgraphs": sum(r.subgraphs for r in reports),
        "kernel_calls": after["kernel_calls"] - before["kernel_calls"],
        "miss_calls": after["miss_calls"] - before["miss_calls"],
        "sizes": after["sizes"],
    }


def _copy(x: Any) -> Any:
    return x.clone() if isinstance(x, torch.Tensor) else x


def _timed(runner: _Mode, inputs: Inputs, device: torch.device) -> float:
    _sync(device)
    t0 = time.perf_counter()
    runner.step(inputs)
    _sync(device)
    return (time.perf_counter() - t0) * 1e3


def _compiles() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peak_mib(device: torch.device) -> float:
    return torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else 0.0


def table(rows: Sequence[ModeRow]) -> str:
    """Per mode: one schedule pass, compiles, peak memory, share served by kernelpro."""
    lines = [f"{'schedule':<18}{'mode':<10}{'pass ms':>10}{'spread':>8}{'vs ind.':>9}"
             f"{'compiles':>9}{'peak MiB':>10}  kernelpro"]  # fmt: skip
    inductor = {r.schedule: r.pass_ms for r in rows if r.mode == "inductor"}
    for r in rows:
        ratio = inductor.get(r.schedule, 0.0) / r.pass_ms if r.pass_ms else 0.0
        served = ""
        if r.served:
            s = r.served
            calls = s["kernel_calls"] + s["miss_calls"]
            share = f"{s['kernel_calls']}/{calls} dispatched calls on kernels" if calls else ""
            served = (
                f"{s['static_replaced']} static + {s['dispatched']} dispatched of "
                f"{s['subgraphs']} subgraphs; {share}"
            )
        lines.append(
            f"{r.schedule:<18}{r.mode:<10}{r.pass_ms:>10.2f}{r.pass_spread_ms:>8.2f}"
            f"{ratio:>8.2f}x{r.compiles + r.recompiles_timed:>9}{r.peak_mib:>10.0f}  {served}"
        )
    return "\n".join(lines)
