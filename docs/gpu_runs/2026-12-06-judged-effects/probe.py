"""Probe (issue 56, not run yet): the per-kernel verdict test's trials, each timed call's ms.

On the H100 (2026-12-06, in the GPU tier beside other tests) the test's verdict with the
Inductor fallback dropped both kernels, rightly, but their leave-one-out effects read -54% and
-95%: its first trial's fallback graph read 1.40 ms, the leave-one-out trials imply ~0.07 ms.
This runs the test alone, three times (Inductor, eager, Inductor), printing every trial's
figures: a first trial slow alone too points at the verdict (cold variants), a fast one at the
GPU contention of the parallel tier (the test is marked `timing` now for that).

    PYTHONPATH=. python3 docs/gpu_runs/2026-12-06-judged-effects/probe.py   # ~1 min, one H100
"""

import sys

import torch

sys.path.insert(0, "tests/rewrite")
import test_judged_gpu as t

from kernelpro_backend.rewrite import verdict_plan

orig = verdict_plan.VerdictPlan.tell


def tell(self, verdict):
    cand, ref = self._queue[0]

    def name(s):
        return "+".join(sorted(k.split("/")[1] for k in s)) or "none"

    print(f"trial {name(cand)} vs {name(ref)}: keep={verdict.keep}")
    print("  with   ", " ".join(f"{x:.4f}" for x in verdict.with_ms))
    print("  without", " ".join(f"{x:.4f}" for x in verdict.without_ms), flush=True)
    return orig(self, verdict)


verdict_plan.VerdictPlan.tell = tell
for fb in ("inductor", "eager", "inductor"):
    torch._dynamo.reset()
    print("=== fallback", fb)
    try:
        t.test_the_kernel_that_slows_the_graph_is_dropped(fb)
        print("PASSED")
    except AssertionError as e:
        print("FAILED", str(e)[:300])
