"""Where two variants of one training step differ on the GPU, kernel by kernel: each variant's
steps profiled (torch.profiler's CUDA activity, timeline.py's trace), then per kernel name the
launches and GPU time a step in each (the largest increases, then the largest decreases), with
each variant's busy and idle GPU time.

The warm-up's in-context check prints it beside its verdict (warmup/incontext.py): a kernel
that won its search alone and loses in the model's step shows there whether the step lost GPU
time (Inductor's kernels around it unfused, copies added, its own kernel slower in place) or
host time (the GPU idle between launches).

Owns: `StepProfile` (`of_events`, `profile_step`) and `diff_lines`.
Must not: decide anything from the difference (the check decides from timed steps).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Sequence

from .timeline import KernelEvent, kernel_events, record_trace

PROFILED_STEPS = 2
SHOWN = 10  # kernels listed under the totals: half that grew, half that shrank, largest first
NAME_CHARS = 56


@dataclasses.dataclass(frozen=True)
class StepProfile:
    """One variant's GPU work a step: {kernel name: (launches, us)}, the kernels' summed time
    and the span from the first kernel's start to the last one's end (both us a step)."""

    kernels: dict[str, tuple[float, float]]
    busy_us: float
    span_us: float

    @property
    def launches(self) -> float:
        return sum(calls for calls, _ in self.kernels.values())

    @classmethod
    def of_events(cls, events: Sequence[KernelEvent], steps: int) -> StepProfile:
        totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for e in events:
            totals[e.name][0] += 1
            totals[e.name][1] += e.duration_us
        kernels = {name: (calls / steps, us / steps) for name, (calls, us) in totals.items()}
        span = (max(e.end_us for e in events) - events[0].start_us) / steps if events else 0.0
        busy = sum(e.duration_us for e in events) / steps
        return cls(kernels, busy, span)


def profile_step(run: Callable[[], None], steps: int = PROFILED_STEPS) -> StepProfile:
    """`run` (one training step) profiled `steps` times after one unprofiled call (CUDA)."""
    return StepProfile.of_events(kernel_events(record_trace(run, (), calls=steps)), steps)


def diff_lines(a: StepProfile, b: StepProfile, names: tuple[str, str]) -> list[str]:
    """The report's lines: `a` against `b` (`names` say what each is), GPU time a step."""
    idle_a, idle_b = max(0.0, a.span_us - a.busy_us), max(0.0, b.span_us - b.busy_us)
    lines = [
        f"  on the GPU, a step {names[0]} against {names[1]}: kernels {a.busy_us / 1e3:.2f} "
        f"against {b.busy_us / 1e3:.2f} ms, {a.launches:.0f} against {b.launches:.0f} launches, "
        f"idle between them {idle_a / 1e3:.2f} against {idle_b / 1e3:.2f} ms"
    ]
    grew, shrank = [], []
    for name in set(a.kernels) | set(b.kernels):
        calls_a, us_a = a.kernels.get(name, (0.0, 0.0))
        calls_b, us_b = b.kernels.get(name, (0.0, 0.0))
        row = (us_a - us_b, calls_a - calls_b, name)
        if row[0] > 0 or (row[0] == 0 and row[1] > 0):
            grew.append(row)
        elif row[0] < 0 or row[1] < 0:
            shrank.append(row)
    # what the first variant added, then what it took away: SHOWN // 2 of each, largest first
    grew.sort(key=lambda r: (-r[0], -r[1], r[2]))
    shrank.sort(key=lambda r: (r[0], r[1], r[2]))
    for delta_us, delta_calls, name in grew[: SHOWN // 2] + shrank[: SHOWN // 2]:
        short = name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 3] + "..."
        lines.append(f"    {delta_us / 1e3:+.3f} ms, {delta_calls:+.0f} launches  {short}")
    return lines
