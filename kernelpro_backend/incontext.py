"""The warm-up's in-context check: a kernel that won its subgraph's search alone must also make
the model's step faster, or the fallback keeps that subgraph.

A search compares a kernel with the fallback compiling its subgraph alone. Inside the model,
replacing the subgraph also splits what Inductor would fuse across its edges (on an H100 a
GPT block, an MLP and an MoE step with 1-3 such kernels, each 3-16% faster alone, ran 3-5%
slower than Inductor, and the MLP's peak memory went from 736 to 1360 MiB; BENCHMARKS.md).
So after a warm-up's searches the step is timed with every kernel found, and with none; if
the kernels lose, each is left out in turn (halves of them, bisected down to the ones to blame,
past EACH_IN_TURN kernels: every timing is a compile of the whole model), and the ones whose
absence makes the step faster are recorded in the cache (cache/context.py), where the finder
reads them. The kernels the warm-up holds (found, not yet checked) are released once the check
has judged them; a check that runs out of the warm-up's time leaves them held (unused).

Then, where the LM-head rewrite took part, the step with and without it: a graph faster
without it gets that recorded against its fingerprint (backend.graph_fingerprint), and later
compiles of that graph leave the rewrite off.

Owns: `check_in_context` (timing and the verdicts), `decide` (the rule, without a GPU).
Must not: search, or time anything but whole steps of the model.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

import torch

from .backend import make_backend
from .fx_passes import Subgraph
from .providers import Kernel

log = logging.getLogger("kernelpro")

# The kernels stay only where the step with them is no slower than the fallback alone (the
# best of two timings each): a step within the timings' noise gains nothing from them and
# risks what the check cannot see (on a shared 4x H200 host an MoE kernel kept "within a 7.9%
# margin" ran the bench's step 0.95x with 24% more peak memory; a fallback timed once, 30% off
# its own earlier value, kept three GPT-2-small kernels that ran the step 1.06x where one kernel
# had run it 1.15x; BENCHMARKS.md).
# To blame one kernel, its absence must speed the step up by more than MARGIN, or more than
# the spread of two timings of the same variant (interleaving is not possible across
# compiles: each variant is compiled on its own).
MARGIN = 0.01
# A variant's time: the fastest of ROUNDS rounds of at least ROUND_MS each (the fastest: the
# host's other work only ever adds; on an H100 a 2 ms GPT-block step timed by median moved
# 44% between two timings of the same compile).
ROUNDS, ROUND_MS = 7, 60.0

# Kept kernels must not raise the step's peak memory by more than this (their outputs and
# the intermediates Inductor would have fused away; an MoE kernel: 492 against 397 MiB).
PEAK_MARGIN = 0.02

# Up to this many kernels, each is left out in turn; more are bisected (a GPT-2-small step
# with 48 kernels: 48 compiles of ~25 s each against ~2 log2(48) per kernel to blame).
EACH_IN_TURN = 4

Timer = Callable[[frozenset[str]], float]


class OutOfTime(Exception):
    """The warm-up's deadline came before the check could time another step."""


def decide(time_without: Timer, used: Sequence[str], first: float) -> tuple[list[str], list[str]]:
    """(the digests whose kernels lose in context, report lines); `time_without(excluded)` is
    the step's time in ms with those kernels left out (the others used), `first` its time
    with none left out, measured already."""
    every = frozenset(used)
    alone = time_without(every)
    again = time_without(frozenset())
    alone_again = time_without(every)
    with_all, none = min(first, again), min(alone, alone_again)
    margin = max(MARGIN, abs(first - again) / with_all, abs(alone - alone_again) / none)
    lines = [
        f"in context: {len(used)} kernel(s) {with_all:.3f} ms a step, the fallback alone "
        f"{none:.3f} ms (margin {margin:.1%})"
    ]
    if with_all <= none:
        return [], lines
    losers: list[str] = []
    if 1 < len(used) <= EACH_IN_TURN:
        for digest in used:
            without = time_without(frozenset([digest]))
            lines.append(f"  without {digest[:12]}: {without:.3f} ms")
            if without < with_all * (1 - margin):
                losers.append(digest)
    elif len(used) > EACH_IN_TURN:
        half = len(used) // 2
        for group in (list(used[:half]), list(used[half:])):
            losers += _to_blame(time_without, group, with_all * (1 - margin), lines)
    if losers and len(losers) < len(used):
        rest = time_without(frozenset(losers))
        lines.append(f"  without the {len(losers)} that lose: {rest:.3f} ms")
        if rest > none:
            losers = list(used)
    return (losers or list(used)), lines


def peak_verdict(with_kernels: int | None, alone: int | None) -> str | None:
    """The report line that sends kernels away for the memory they add to the step (peak
    bytes with them and with the fallback alone), or None (within PEAK_MARGIN, or unknown)."""
    if not with_kernels or not alone or with_kernels <= alone * (1 + PEAK_MARGIN):
        return None
    return (
        f"  the step's peak memory {with_kernels / 2**20:.0f} MiB with them against "
        f"{alone / 2**20:.0f} alone: they go"
    )


def _to_blame(time_without: Timer, group: list[str], faster: float, lines: list[str]) -> list[str]:
    """The kernels of `group` to blame: the step without the group is under `faster` ms, then
    each half of it is tried the same way, down to single kernels."""
    without = time_without(frozenset(group))
    name = group[0][:12] if len(group) == 1 else f"{len(group)} kernels from {group[0][:12]}"
    lines.append(f"  without {name}: {without:.3f} ms")
    if without >= faster:
        return []
    if len(group) == 1:
        return group
    half = len(group) // 2
    return _to_blame(time_without, group[:half], faster, lines) + _to_blame(
        time_without, group[half:], faster, lines
    )


LM_HEAD_OFF = {"rewrite_linear_cross_entropy": False}
RECORDED = "recorded off for this graph"


def _check_lm_head(on: float, off: float) -> str:
    """The LM-head rewrite's verdict line (it ends with RECORDED when the graph is faster
    without it): the op saves GPU time and memory, but its host path can cost more than that
    on a step the host sets (BENCHMARKS.md, mini_gpt)."""
    line = f"in context: the LM-head rewrite {on:.3f} ms a step, without it {off:.3f} ms"
    return f"{line}: {RECORDED}" if off < on * (1 - MARGIN) else line


class _Excluding:
    """A provider that leaves some digests' kernels out and notes the ones it serves."""

    def __init__(self, inner: Any, excluded: frozenset[str], served: dict[str, str]) -> None:
        self.inner, self.excluded, self.served = inner, excluded, served

    def _pick(self, subgraph: Subgraph, find: Callable[[Subgraph], Kernel | None]) -> Any:
        digest = self.inner.cache.key_for(subgraph.key).digest
        if digest in self.excluded:
            return None
        kernel = find(subgraph)
        if kernel is not None:
            self.served[digest] = subgraph.pattern
        return kernel

    def find(self, subgraph: Subgraph) -> Kernel | None:
        return self._pick(subgraph, self.inner.find)

    def find_dynamic(self, subgraph: Subgraph) -> Kernel | None:
        return self._pick(subgraph, getattr(self.inner, "find_dynamic", self.inner.find))

    def family_known(self, family: str) -> bool:
        known = getattr(self.inner, "family_known", None)
        return bool(known is not None and known(family))


def time_step(
    model: torch.nn.Module,
    backend: Callable[..., Any],
    opts: dict[str, Any],
    loss_fn: Callable[[Any], torch.Tensor],
    inputs: Sequence[Any],
) -> tuple[float, int]:
    """(ms, peak bytes) of one forward + backward of `model` compiled with `backend` (fresh
    compile): the fastest round's mean step, and the most memory allocated during the rounds."""
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend, options=opts)

    def once() -> None:
        loss_fn(compiled(*inputs)).backward()
        model.zero_grad(set_to_none=True)

    for _ in range(3):
        once()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    once()
    torch.cuda.synchronize()
    steps = max(5, math.ceil(ROUND_MS / max((time.perf_counter() - t0) * 1e3, 1e-3)))
    torch.cuda.reset_peak_memory_stats()
    rounds = []
    for _ in range(ROUNDS):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            once()
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - t0) * 1e3 / steps)
    return min(rounds), torch.cuda.max_memory_allocated()


def check_in_context(
    model: torch.nn.Module,
    inputs: Sequence[Any],
    opts: dict[str, Any],
    loss_fn: Callable[[Any], torch.Tensor],
    finder: Any,
    held: Collection[str] = (),
    deadline: float | None = None,
) -> list[str]:
    """Time the training step with and without the kernels `finder` (cache-only) serves;
    record the losers in the finder's cache and release the `held` digests (the warm-up's
    finds) it judged. Past `deadline` (time.perf_counter()) no further step is timed: what is
    undecided then stays held. Returns the report's lines."""
    served: dict[str, str] = {}
    sessions: list[Any] = []
    peaks: dict[tuple[frozenset[str], bool], int] = {}  # each variant's peak bytes
    timings = 0
    finder.serve_held = True  # the check times the kernels the warm-up holds

    def time_with(excluded: frozenset[str], changed: dict[str, Any] | None = None) -> float:
        nonlocal timings
        if deadline is not None and time.perf_counter() > deadline:
            raise OutOfTime(f"the warm-up's deadline came after {timings} step timing(s)")
        timings += 1
        log.info(
            "kernelpro warmup: in context: compiling and timing the step without %d of the "
            "kernels%s",
            len(excluded),
            " and without the LM-head rewrite" if changed else "",
        )
        provider = _Excluding(finder, excluded, served)
        backend = make_backend(provider=provider, sessions=sessions)
        ms, peaks[(excluded, bool(changed))] = time_step(
            model, backend, {**opts, **(changed or {})}, loss_fn, inputs
        )
        return ms

    lines: list[str] = []
    try:
        _judge(model, finder, served, sessions, time_with, held, lines, peaks)
    except OutOfTime as e:
        lines.append(
            f"in context: out of time ({e}): the kernels not judged stay held (unused) "
            "until a warm-up finishes this check"
        )
    torch._dynamo.reset()
    for line in lines:
        log.info("kernelpro warmup: %s", line)
    return lines


def _judge(
    model: torch.nn.Module,
    finder: Any,
    served: dict[str, str],
    sessions: list[Any],
    time_with: Callable[..., float],
    held: Collection[str],
    lines: list[str],
    peaks: dict[tuple[frozenset[str], bool], int],
) -> None:
    """The check's verdicts, each recorded as soon as it is made (`lines` grows with them)."""
    first = time_with(frozenset())  # and which kernels the step uses
    used = sorted(served)
    losers: list[str] = []
    if used:
        losers, verdict = decide(time_with, used, first)
        lines += verdict
        heavier = peak_verdict(peaks.get((frozenset(), False)), peaks.get((frozenset(used), False)))
        if not losers and heavier:
            losers = list(used)
            lines.append(heavier)
    else:
        lines.append("in context: the step uses no kernelpro kernel")
    for digest in losers:
        finder.cache.context.reject(
            digest, pattern=served[digest], model=type(model).__name__, why=lines[0]
        )
    finder.cache.context.settle(set(held) | set(used))
    if losers:
        lines.append(f"  recorded as losing in context: {', '.join(d[:12] for d in losers)}")
    rewritten = {s.fingerprint for s in sessions if s.rewrites.get("linear_cross_entropy")}
    if rewritten:
        on = time_with(frozenset(losers)) if losers else first
        lines.append(_check_lm_head(on, time_with(frozenset(losers), LM_HEAD_OFF)))
        if lines[-1].endswith(RECORDED):
            for fingerprint in rewritten:
                finder.cache.context.set_graph_options(
                    fingerprint, LM_HEAD_OFF, model=type(model).__name__, why=lines[-1]
                )
