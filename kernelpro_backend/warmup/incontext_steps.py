"""The in-context check's timings: variants of a model's training step compiled with some of
kernelpro's kernels left out (or an option changed), timed one after another, or side by side
and in turns.

A variant compiled on its own copy of the model keeps its compiled code beside another's (two
copies compiled with different backends each run their own), so two variants can take turns
within every round: a host busy with other work slows both alike, where timings minutes apart
were 30% apart on a shared 4x H200 host (BENCHMARKS.md).

Owns: `StepVariants` (`time_with`: one variant compiled and timed; `in_turns`: several, side by
side), `time_step`, `time_rounds`, `OutOfTime`. Must not: decide anything (incontext.py does).
"""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..backend import make_backend
from ..fx_passes import Subgraph
from ..options import Options
from ..profilers.step_diff import StepProfile, profile_step
from ..rewrite.providers import Kernel
from ..runtime.cuda.compile import nvcc_paused
from ..runtime.timing import launch_timing

log = logging.getLogger("kernelpro.warmup")

# A variant's time: the fastest of ROUNDS rounds of at least ROUND_MS each (the fastest: the
# host's other work only ever adds; on an H100 a 2 ms GPT-block step timed by median moved
# 44% between two timings of the same compile). Rounds of 60 ms (~10 host-bound mini_gpt
# steps) split 4-5 of 8 between the LM-head rewrite on and off where rounds of 20 steps put
# it behind in 12 of 12 (H100, 2026-11-27, BENCHMARKS.md): 200 ms, ~3 s per comparison.
ROUNDS, ROUND_MS = 7, 200.0
# Variants compiled side by side take turns within each of these rounds (its first and second
# halves give each variant the two timings `incontext.decide` compares).
PAIRED_ROUNDS = 8

Variant = tuple["frozenset[str] | None", "dict[str, Any] | None"]
Key = tuple[frozenset[str], bool]  # a compiled variant: (excluded digests, an option changed)


class OutOfTime(Exception):
    """The warm-up's deadline came before the check could time another step."""


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


class _Stepper:
    """One compiled variant of the training step, on its own copy of the model."""

    def __init__(
        self,
        model: torch.nn.Module,
        backend: Callable[..., Any],
        opts: dict[str, Any],
        loss_fn: Callable[[Any], torch.Tensor],
        inputs: Sequence[Any],
    ) -> None:
        self.model, self.loss_fn, self.inputs = model, loss_fn, inputs
        self.compiled = torch.compile(model, backend=backend, options=opts)
        self.host: tuple[float, float] | None = None  # ms to launch one step, ms to its end

    def once(self) -> None:
        self.loss_fn(self.compiled(*self.inputs)).backward()
        self.model.zero_grad(set_to_none=True)


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def time_rounds(steppers: Sequence[_Stepper], rounds: int) -> tuple[list[list[float]], list[int]]:
    """Each stepper's mean step (ms) in each of `rounds` rounds of at least ROUND_MS, the
    steppers taking turns within every round (this process's nvcc runs stopped meanwhile), and
    the most memory each allocated (bytes; 0 off the GPU)."""
    cuda = torch.cuda.is_available()
    for stepper in steppers:
        for _ in range(2):
            stepper.once()
        # the third: how long its launches take against the whole step
        host = launch_timing(stepper.once, torch.device("cuda" if cuda else "cpu"), reps=1)
        stepper.host = host if cuda else None
    times: list[list[float]] = [[] for _ in steppers]
    peaks = [0 for _ in steppers]
    # nvcc still building CUTLASS libraries in the background shares the host's cores with a
    # host-bound step (its rounds spread 16% beside six builds): stopped while the compiled
    # steps are timed (they compile nothing now: each ran three times above), resumed after
    with nvcc_paused() as stopped:
        if stopped:
            log.info("in context: %d nvcc run(s) paused while timing", stopped)
        t0 = time.perf_counter()
        steppers[0].once()
        _sync()
        steps = max(5, math.ceil(ROUND_MS / max((time.perf_counter() - t0) * 1e3, 1e-3)))
        for _ in range(rounds):
            for i, stepper in enumerate(steppers):
                if cuda:
                    torch.cuda.reset_peak_memory_stats()
                _sync()
                t0 = time.perf_counter()
                for _ in range(steps):
                    stepper.once()
                _sync()
                times[i].append((time.perf_counter() - t0) * 1e3 / steps)
                if cuda:
                    peaks[i] = max(peaks[i], torch.cuda.max_memory_allocated())
    return times, peaks


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
    times, peaks = time_rounds([_Stepper(model, backend, opts, loss_fn, inputs)], ROUNDS)
    return min(times[0]), peaks[0]


class StepVariants:
    """The variants of one model's step the check times: which kernels each served (`served`:
    the variants that leave none out), the compile sessions (which graphs the LM-head rewrite
    took part in) and each variant's peak memory, keyed (excluded digests, option changed)."""

    def __init__(
        self,
        model: torch.nn.Module,
        inputs: Sequence[Any],
        opts: dict[str, Any],
        loss_fn: Callable[[Any], torch.Tensor],
        finder: Any,
        deadline: float | None,
    ) -> None:
        self.model, self.inputs, self.opts, self.loss_fn = model, inputs, opts, loss_fn
        self.finder, self.deadline = finder, deadline
        self.served: dict[str, str] = {}
        self.sessions: list[Any] = []
        self.peaks: dict[Key, int] = {}
        # Under CUDA graphs a replay allocates nothing (its memory was taken when recorded),
        # so a step's peak says nothing of what it needs: no peaks, no memory verdicts.
        self.graphed = Options.resolve(options=opts).cuda_graphs
        self.host: dict[Key, tuple[float, float]] = {}
        # The GPU's work a step of the variants timed in turns (profilers/step_diff.py): where
        # the kernels lose, the report shows what the step spent differently with them.
        self.profiles: dict[Key, StepProfile] = {}
        self.timings = 0
        # The longest one variant took (compiled and timed): none starts that would end past
        # the deadline (a corpus model's step compiles in about a minute).
        self.longest_s = 0.0

    def _start(self, count: int, expect: int | None = None) -> None:
        """Before `count` timings (`expect` of them to come now, in turns, when they differ)."""
        now = time.perf_counter()
        if self.deadline is not None and now > self.deadline:
            raise OutOfTime(f"the warm-up's deadline came after {self.timings} step timing(s)")
        coming = count if expect is None else expect
        if self.deadline is not None and now + coming * self.longest_s > self.deadline:
            raise OutOfTime(
                f"after {self.timings} step timing(s), {coming} more of up to "
                f"{self.longest_s:.0f} s each would end past the warm-up's deadline"
            )
        self.timings += count

    def _took(self, t0: float, variants: int = 1) -> None:
        self.longest_s = max(self.longest_s, (time.perf_counter() - t0) / max(1, variants))

    def _backend(self, excluded: frozenset[str], served: dict[str, str]) -> Callable[..., Any]:
        provider = _Excluding(self.finder, excluded, served)
        return make_backend(provider=provider, sessions=self.sessions)

    def time_with(self, excluded: frozenset[str], changed: dict[str, Any] | None = None) -> float:
        """Ms of the step compiled without the `excluded` kernels (and with `changed` options)."""
        self._start(1)
        log.info(
            "in context: compiling and timing the step without %d of the kernels%s",
            len(excluded),
            " and without the LM-head rewrite" if changed else "",
        )
        opts = {**self.opts, **(changed or {})}
        backend = self._backend(excluded, self.served)
        t0 = time.perf_counter()
        ms, peak = time_step(self.model, backend, opts, self.loss_fn, self.inputs)
        self._took(t0)
        if not self.graphed:
            self.peaks[(excluded, bool(changed))] = peak
        return ms

    def in_turns(self, variants: Sequence[Variant]) -> list[list[float]] | None:
        """The variants (excluded digests, None: those the first variant's step used; changed
        options) compiled side by side, each on its own copy of the model, and timed in turns:
        each one's round times (a variant that would leave out nothing is skipped); None where
        that cannot run here (off the GPU, or it failed: then one after another)."""
        self._start(0, expect=len(variants))
        if not torch.cuda.is_available():
            return None
        self.timings += len(variants)
        log.info("in context: %d variants of the step in turns", len(variants))
        torch._dynamo.reset()
        t0 = time.perf_counter()
        try:
            steppers, keys = [], []
            for i, (excluded, changed) in enumerate(variants):
                if excluded is None and not self.served:
                    continue  # the step used no kernel: nothing to leave out
                left_out = frozenset(self.served) if excluded is None else excluded
                model = self.model if i == 0 else copy.deepcopy(self.model)
                backend = self._backend(left_out, self.served if i == 0 else {})
                opts = {**self.opts, **(changed or {})}
                steppers.append(_Stepper(model, backend, opts, self.loss_fn, self.inputs))
                steppers[-1].once()  # compiled now: the first tells which kernels the step uses
                keys.append((left_out, bool(changed)))
            times, peaks = time_rounds(steppers, PAIRED_ROUNDS)
            self._profile(steppers, keys)
            self._took(t0, len(steppers))
        except Exception as e:  # memory for the copies, a compile: one after another instead
            log.warning(
                "in context: timing the variants in turns failed (%s: %s); "
                "timing them one after another",
                type(e).__name__,
                str(e)[:200],
            )
            return None
        finally:
            torch._dynamo.reset()
        if not self.graphed:
            self.peaks.update(zip(keys, peaks, strict=True))
        for key, stepper in zip(keys, steppers, strict=True):
            if stepper.host is not None:
                self.host[key] = stepper.host
        return times

    def _profile(self, steppers: Sequence[_Stepper], keys: Sequence[Key]) -> None:
        """Each stepper's GPU work a step, once timed (a failure is logged, not raised: the
        profile explains a verdict, it does not make one)."""
        for key, stepper in zip(keys, steppers, strict=True):
            try:
                self.profiles[key] = profile_step(stepper.once)
            except Exception as e:
                log.warning(
                    "in context: profiling a variant of the step failed (%s: %s)",
                    type(e).__name__,
                    str(e)[:200],
                )
                return
