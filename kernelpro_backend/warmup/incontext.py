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
has judged them; a check that runs out of the warm-up's time before it has timed the step
with and without them leaves them held (unused), one that runs out while blaming keeps those
of the fastest step it timed where that beat the fallback alone by the margin, and sends the
others away (the step was not faster with them).

Then, where the LM-head rewrite took part, the step with and without it: a graph faster
without it gets that recorded against its fingerprint (backend.graph_fingerprint), and later
compiles of that graph leave the rewrite off.

The two comparisons that decide most (every kernel against none, the LM-head rewrite on
against off) compile both variants side by side and time them in turns within each round
(incontext_steps.py), so a host busy with other work slows both alike; where that cannot run
(off the GPU, no memory for a second copy of the model) each variant is timed on its own.

Owns: `check_in_context` (the verdicts, recorded), `decide` (the rule, without a GPU).
Must not: search, or time anything but whole steps of the model (incontext_steps.py times).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Collection, Sequence
from typing import Any

import torch

from ..profilers.step_diff import diff_lines
from ..runtime.timing import host_bound
from .incontext_steps import PAIRED_ROUNDS, OutOfTime, StepVariants

log = logging.getLogger("kernelpro.warmup")

# The kernels stay only where the step with them is no slower than the fallback alone (the
# best of two timings each): a step within the timings' noise gains nothing from them and
# risks what the check cannot see (on a shared 4x H200 host an MoE kernel kept "within a 7.9%
# margin" ran the bench's step 0.95x with 24% more peak memory; a fallback timed once, 30% off
# its own earlier value, kept three GPT-2-small kernels that ran the step 1.06x where one kernel
# had run it 1.15x; BENCHMARKS.md).
# To blame one kernel, its absence must speed the step up by more than MARGIN, or more than
# the spread of two timings of the same variant.
MARGIN = 0.01

# Where the two steps were timed in turns, the kernels must also make the step faster in this
# share of the rounds: 6 of 8 (under pure noise 6 or more of 8 come 14% of the time). On a
# host-bound step whose rounds spread by 16% a best timing 0.4% ahead kept three kernels that
# the bench then ran 0.73x (mini_gpt, one H100, 2026-11-27; BENCHMARKS.md).
KEEP_SHARE = 6 / 8

# Kept kernels must not raise the step's peak memory by more than this (their outputs and
# the intermediates Inductor would have fused away; an MoE kernel: 492 against 397 MiB).
PEAK_MARGIN = 0.02

# Up to this many kernels, each is left out in turn; more are bisected (a GPT-2-small step
# with 48 kernels: 48 compiles of ~25 s each against ~2 log2(48) per kernel to blame).
EACH_IN_TURN = 4

Timer = Callable[[frozenset[str]], float]


def faster_in(rounds: Sequence[float], others: Sequence[float]) -> int:
    """In how many rounds timed in turns the first variant's step was faster than the other's
    (the sign count KEEP_SHARE and FASTER_OFF_SHARE are read against)."""
    return sum(a < b for a, b in zip(rounds, others, strict=True))


def decide(
    time_without: Timer,
    used: Sequence[str],
    first: float,
    wins: tuple[int, int] | None = None,
    lines: list[str] | None = None,
) -> tuple[list[str], list[str]]:
    """(the digests whose kernels lose in context, report lines); `time_without(excluded)` is
    the step's time in ms with those kernels left out (the others used), `first` its time
    with none left out, measured already; `wins`: (rounds the step was faster with every
    kernel, rounds) where the two were timed in turns. The lines are appended to `lines` as
    they come. Where the deadline stops the blaming (each timing compiles the model), the
    kernels left out of a step timed ahead of the fallback go (_out_of_time), else all."""
    lines = [] if lines is None else lines
    every = frozenset(used)
    alone = time_without(every)
    again = time_without(frozenset())
    alone_again = time_without(every)
    with_all, none = min(first, again), min(alone, alone_again)
    margin = max(MARGIN, abs(first - again) / with_all, abs(alone - alone_again) / none)
    line = (
        f"in context: {len(used)} kernel(s) {with_all:.3f} ms a step, the fallback alone "
        f"{none:.3f} ms (margin {margin:.1%}"
    )
    ahead = with_all <= none
    if wins is not None:
        line += f"; faster with them in {wins[0]} of {wins[1]} rounds"
        ahead = ahead and wins[0] >= KEEP_SHARE * wins[1]
    lines.append(line + ")")
    if ahead:
        return [], lines
    timed: dict[frozenset[str], float] = {}

    def noted(excluded: frozenset[str]) -> float:
        timed[excluded] = min(time_without(excluded), timed.get(excluded, math.inf))
        return timed[excluded]

    try:
        losers = _blame(noted, used, with_all * (1 - margin), none, lines)
    except OutOfTime as e:
        # Held instead, they would meet the same check in every later warm-up, each finding
        # more kernels to blame (a BERT warm-up's check: 41 s a compile, 3 of them in its 140 s)
        return _out_of_time(e, used, timed, none * (1 - margin), lines), lines
    return (losers or list(used)), lines


def _out_of_time(
    e: OutOfTime,
    used: Sequence[str],
    timed: dict[frozenset[str], float],
    faster: float,
    lines: list[str],
) -> list[str]:
    """The losers where the deadline stopped the blaming: the kernels left out of the fastest
    step timed so far, where that step (some of the kernels in) beat the fallback alone by the
    margin (`faster` ms; a ConvNeXt warm-up's check timed its backward graph's kernels alone
    1.3% ahead, then ran out of time and sent all eight away); else all of them."""
    some = {ex: t for ex, t in timed.items() if ex and len(ex) < len(used) and t < faster}
    if not some:
        lines.append(
            f"  {e}: no time to find which of the {len(used)} lose; they all go (the step was "
            "not faster with them)"
        )
        return list(used)
    excluded = min(some, key=lambda ex: some[ex])
    lines.append(
        f"  {e}: the step without {len(excluded)} of the {len(used)} ran {some[excluded]:.3f} ms, "
        f"under the fallback alone by the margin: those go, the other {len(used) - len(excluded)} "
        "stay"
    )
    return sorted(excluded)


def _blame(
    time_without: Timer, used: Sequence[str], faster: float, none: float, lines: list[str]
) -> list[str]:
    """The kernels whose absence makes the step faster than `faster` ms (each in turn, or
    bisected); all of them where the step without just those is still slower than `none`."""
    losers: list[str] = []
    if 1 < len(used) <= EACH_IN_TURN:
        for digest in used:
            without = time_without(frozenset([digest]))
            lines.append(f"  without {digest[:12]}: {without:.3f} ms")
            if without < faster:
                losers.append(digest)
    elif len(used) > EACH_IN_TURN:
        half = len(used) // 2
        for group in (list(used[:half]), list(used[half:])):
            losers += _to_blame(time_without, group, faster, lines)
    if losers and len(losers) < len(used):
        rest = time_without(frozenset(losers))
        lines.append(f"  without the {len(losers)} that lose: {rest:.3f} ms")
        if rest > none:
            losers = list(used)
    return losers


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


# Of the rounds timed in turns, the share in which the step must be faster without the LM-head
# rewrite for it to go: 7 of 8 (a sign test: under pure noise 7 or more of 8 come 3.5% of the
# time). The rewrite halves the step's peak memory; on a host-bound step its best timings alone
# turned it off at 2% apart (mini_gpt on an H100, BENCHMARKS.md "One H100 alone").
FASTER_OFF_SHARE = 7 / 8


def _check_lm_head(
    on: float, off: float, rounds: tuple[list[float], list[float]] | None = None
) -> str:
    """The LM-head rewrite's verdict line (it ends with RECORDED when the graph is faster
    without it): the op saves GPU time and memory, but its host path can cost more than that
    on a step the host sets (BENCHMARKS.md, mini_gpt). With `rounds` (on, off: timed in turns)
    the step must also be faster without it in FASTER_OFF_SHARE of them."""
    line = f"in context: the LM-head rewrite {on:.3f} ms a step, without it {off:.3f} ms"
    slower = off < on * (1 - MARGIN)
    if rounds is not None:
        faster = faster_in(rounds[1], rounds[0])
        line += f" (faster without it in {faster} of {len(rounds[0])} rounds)"
        slower = slower and faster >= FASTER_OFF_SHARE * len(rounds[0])
    return f"{line}: {RECORDED}" if slower else line


def _replaying(time_with: Timer, replay: dict[frozenset[str], list[float]]) -> Timer:
    """`time_with`, answering first from timings already taken (in turns) for those sets."""

    def timer(excluded: frozenset[str]) -> float:
        taken = replay.get(excluded)
        return taken.pop(0) if taken else time_with(excluded)

    return timer


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
    finder.serve_held = True  # the check times the kernels the warm-up holds
    steps = StepVariants(model, inputs, opts, loss_fn, finder, deadline)
    lines: list[str] = []
    try:
        _judge(model, finder, steps, held, lines)
    except OutOfTime as e:
        lines.append(
            f"in context: out of time ({e}): the kernels not judged stay held (unused) "
            "until a warm-up finishes this check"
        )
    if steps.graphed:  # after the verdicts: their first line is the reason a rejection keeps
        lines.append("in context: the step replayed as CUDA graphs (its peak memory not judged)")
    torch._dynamo.reset()
    for line in lines:
        log.info("%s", line)
    return lines


def _judge(
    model: torch.nn.Module,
    finder: Any,
    steps: StepVariants,
    held: Collection[str],
    lines: list[str],
) -> None:
    """The check's verdicts, each recorded as soon as it is made (`lines` grows with them).
    The step with every kernel against the step without the ones it uses, and the LM-head
    rewrite on against off, are timed in turns where they can be (each side's best of the
    first and of the second half of the rounds: the two timings `decide` asks for)."""
    served, time_with, peaks = steps.served, steps.time_with, steps.peaks
    turns = steps.in_turns([(frozenset(), None), (None, None)])
    replay: dict[frozenset[str], list[float]] = {}
    wins = None
    if turns is not None:
        half = PAIRED_ROUNDS // 2
        first, again = min(turns[0][:half]), min(turns[0][half:])
        replay = {frozenset(): [again]}
        if len(turns) > 1:  # the step used kernels: the second variant ran without them
            replay[frozenset(served)] = [min(turns[1][:half]), min(turns[1][half:])]
            wins = (faster_in(turns[0], turns[1]), len(turns[0]))
    else:
        first = time_with(frozenset())  # and which kernels the step uses
    used = sorted(served)
    losers: list[str] = []
    if used:
        losers, _ = decide(_replaying(time_with, replay), used, first, wins, lines)
        with_them = steps.profiles.get((frozenset(), False))
        without = steps.profiles.get((frozenset(used), False))
        if with_them is not None and without is not None:
            lines.extend(diff_lines(with_them, without, ("with the kernels", "without")))
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
    rewritten = {s.fingerprint for s in steps.sessions if s.rewrites.get("linear_cross_entropy")}
    if rewritten:
        lost = frozenset(losers)
        turns = steps.in_turns([(lost, None), (lost, LM_HEAD_OFF)])
        if turns is not None:
            lines.append(_check_lm_head(min(turns[0]), min(turns[1]), (turns[0], turns[1])))
        else:
            on = time_with(lost) if losers else first
            lines.append(_check_lm_head(on, time_with(lost, LM_HEAD_OFF)))
        if lines[-1].endswith(RECORDED):
            for fingerprint in rewritten:
                finder.cache.context.set_graph_options(
                    fingerprint, LM_HEAD_OFF, model=type(model).__name__, why=lines[-1]
                )
    off = bool(rewritten) and lines[-1].endswith(RECORDED)
    hint = host_bound_line(steps.host.get((frozenset(losers), off)), steps.graphed)
    if hint:
        lines.append(hint)


def host_bound_line(host: tuple[float, float] | None, graphed: bool) -> str | None:
    """The report's hint for a host-bound step (`host`: ms to launch one step, ms until it
    finished), or None: GPU-bound, unknown, or already replayed as CUDA graphs."""
    if host is None or graphed or not host_bound(*host):
        return None
    return (
        f"in context: the step is host-bound (launching it takes {host[0]:.1f} of its "
        f"{host[1]:.1f} ms): GPU-side gains show only in part; replayed as CUDA graphs "
        "(options={'cuda_graphs': True} or mode='reduce-overhead') they show in full"
    )
