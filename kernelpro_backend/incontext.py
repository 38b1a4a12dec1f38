"""The warm-up's in-context check: a kernel that won its subgraph's search alone must also make
the model's step faster, or the fallback keeps that subgraph.

A search compares a kernel with the fallback compiling its subgraph alone. Inside the model,
replacing the subgraph also splits what Inductor would fuse across its edges (on an H100 a
GPT block, an MLP and an MoE step with 1-3 such kernels, each 3-16% faster alone, ran 3-5%
slower than Inductor, and the MLP's peak memory went from 736 to 1360 MiB; BENCHMARKS.md).
So after a warm-up's searches the step is timed with every kernel found, and with none; if
the kernels lose, each is left out in turn, and the ones whose absence makes the step faster
are recorded in the cache (cache/context.py), where the finder reads them.

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
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .backend import make_backend
from .fx_passes import Subgraph
from .providers import Kernel

log = logging.getLogger("kernelpro")

# Steps within 1% are the same step (interleaving is not possible across compiles: each
# variant is compiled on its own), or within the spread of two timings of the same variant.
MARGIN = 0.01
# A variant's time: the fastest of ROUNDS rounds of at least ROUND_MS each (the fastest: the
# host's other work only ever adds; on an H100 a 2 ms GPT-block step timed by median moved
# 44% between two timings of the same compile).
ROUNDS, ROUND_MS = 7, 60.0

Timer = Callable[[frozenset[str]], float]


def decide(time_without: Timer, used: Sequence[str], first: float) -> tuple[list[str], list[str]]:
    """(the digests whose kernels lose in context, report lines); `time_without(excluded)` is
    the step's time in ms with those kernels left out (the others used), `first` its time
    with none left out, measured already."""
    every = frozenset(used)
    none = time_without(every)
    again = time_without(frozenset())
    with_all = min(first, again)
    margin = max(MARGIN, abs(first - again) / with_all)
    lines = [
        f"in context: {len(used)} kernel(s) {with_all:.3f} ms a step, the fallback alone "
        f"{none:.3f} ms (margin {margin:.1%})"
    ]
    if with_all <= none * (1 + margin):
        return [], lines
    losers = []
    if len(used) > 1:
        for digest in used:
            without = time_without(frozenset([digest]))
            lines.append(f"  without {digest[:12]}: {without:.3f} ms")
            if without < with_all * (1 - margin):
                losers.append(digest)
        if losers and len(losers) < len(used):
            rest = time_without(frozenset(losers))
            lines.append(f"  without the {len(losers)} that lose: {rest:.3f} ms")
            if rest > none * (1 + margin):
                losers = list(used)
    return (losers or list(used)), lines


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
) -> float:
    """Ms of one forward + backward of `model` compiled with `backend` (fresh compile): the
    fastest round's mean step."""
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
    rounds = []
    for _ in range(ROUNDS):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            once()
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - t0) * 1e3 / steps)
    return min(rounds)


def check_in_context(
    model: torch.nn.Module,
    inputs: Sequence[Any],
    opts: dict[str, Any],
    loss_fn: Callable[[Any], torch.Tensor],
    finder: Any,
) -> list[str]:
    """Time the training step with and without the kernels `finder` (cache-only) serves;
    record the losers in the finder's cache. Returns the report's lines."""
    served: dict[str, str] = {}
    sessions: list[Any] = []

    def time_with(excluded: frozenset[str], changed: dict[str, Any] | None = None) -> float:
        log.info(
            "kernelpro warmup: in context: compiling and timing the step without %d of the "
            "kernels%s",
            len(excluded),
            " and without the LM-head rewrite" if changed else "",
        )
        provider = _Excluding(finder, excluded, served)
        backend = make_backend(provider=provider, sessions=sessions)
        return time_step(model, backend, {**opts, **(changed or {})}, loss_fn, inputs)

    first = time_with(frozenset())  # and which kernels the step uses
    used = sorted(served)
    losers: list[str] = []
    lines = ["in context: the step uses no kernelpro kernel"]
    if used:
        losers, lines = decide(time_with, used, first)
    for digest in losers:
        finder.cache.context.reject(
            digest, pattern=served[digest], model=type(model).__name__, why=lines[0]
        )
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
    torch._dynamo.reset()
    for line in lines:
        log.info("kernelpro warmup: %s", line)
    return lines
