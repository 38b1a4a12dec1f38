"""The eager ATen call of a subgraph as one of its candidates.

Inductor is not always faster than the ATen ops it replaces (measured on H100: a float32 mean
over a dimension of an 8 GB tensor, a pointwise chain after a GEMM): where eager beats the
Inductor fallback by more than the spread of both timings and by what a launch through
kernelpro::launch costs, the subgraph's winner is its own eager reference, behind the opaque op
so that Inductor cannot regenerate it. Then a kernelpro subgraph is never slower than eager
either.

A near tie — eager within NEAR_TIE of the fallback alone, or faster by less than the launch
through the op costs — is no evidence either way: the fallback's code timed alone is not what
it runs inside the graph (KernelBench L1_63, a convolution: 7.1 ms under eager against 12.6 ms
under Inductor in the whole model, while alone the two were close). With the in-context verdict
on (option `in_context`), such an eager call is stored too, as a tentative candidate: the finder
serves it only to graphs that are judged in context (rewrite/judged.py), which keep it only if
the whole graph is faster with it (the verdict is cached, so this costs once). Off, today's rule
stands: only a clear win is stored.

Owns: `eager_artifact(baselines, options)` (the artifact for an eager win or, under
`in_context`, a near tie; else None), `near_tie(kernel_ms, fallback_ms)` (the band),
`clear_win`, `is_eager(artifact)` and `eager_kernel(subgraph)` (what such an entry runs: the subgraph's
reference module, rebuilt from its canonical text, no code of the entry's own).
Must not: measure (the search's baselines are the measurement) or decide whether an entry is
used (finder.py does).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..cache.artifact import KernelArtifact, Provenance
from ..fx_passes import Subgraph
from ..options import Options
from ..rewrite.providers import CallableKernel, Kernel
from ..runtime.result import EvalResult
from ..search.rewards import faster_beyond_spread

LANGUAGE = "aten"  # an entry that runs the subgraph's own ATen ops; it carries no code

# A candidate whose isolated time is at most this far above the fallback's is a near tie: the
# two isolated medians differ by less than what the fallback's own code gains or loses inside
# the graph (the three regressions of issue 56 were 3-22% apart from their isolated figures).
NEAR_TIE = 0.05


def near_tie(kernel_ms: float | None, fallback_ms: float | None) -> bool:
    """Whether a time alone is within NEAR_TIE of the fallback's alone (faster counts too)."""
    if kernel_ms is None or fallback_ms is None or fallback_ms <= 0:
        return False
    return kernel_ms <= fallback_ms * (1 + NEAR_TIE)


def is_eager(artifact: KernelArtifact) -> bool:
    return artifact.language == LANGUAGE


def eager_artifact(
    baselines: Mapping[str, EvalResult],
    options: Options,
    log_path: str | None = None,
    chosen: bool = False,
) -> KernelArtifact | None:
    """An artifact for the eager reference when it beats the Inductor fallback clearly, or
    (option `in_context`) ties with it (`near_tie`, tentative: see the module docstring), or
    objective "energy"'s rule `chosen` it for its joules (tuner/payoff.py decides whether it is
    served); else None (the eager fallback needs none: it runs the same ops already)."""
    eager, inductor = baselines.get("eager"), baselines.get("inductor")
    if options.fallback != "inductor" or eager is None or inductor is None:
        return None
    if not (eager.ok and inductor.ok):
        return None
    tie = options.in_context and near_tie(eager.median_ms, inductor.median_ms)
    if not (chosen or clear_win(eager, inductor, options) or tie):
        return None
    return KernelArtifact(
        language=LANGUAGE,
        source="",
        entry="eager",
        kernel_ms=eager.median_ms,
        baselines_ms={n: r.median_ms for n, r in baselines.items() if r.ok and r.median_ms},
        provenance=Provenance(search_log=log_path),
    )


def clear_win(eager: EvalResult, inductor: EvalResult, options: Options) -> bool:
    """Eager beats Inductor alone beyond the spread of both and by what the op's launch costs."""
    gain = (inductor.median_ms or 0.0) - (eager.median_ms or 0.0)
    return faster_beyond_spread(eager, inductor) and gain >= options.op_min_gain_ms()


def eager_kernel(subgraph: Subgraph) -> Kernel:
    """What an eager entry runs: the subgraph's reference module (its ATen ops), called
    through kernelpro::launch (a CallableKernel is never inlined)."""
    return CallableKernel(f"aten-{subgraph.key.short()}", subgraph.module())
