"""The eager ATen call of a subgraph as one of its candidates.

Inductor is not always faster than the ATen ops it replaces (measured on H100: a float32 mean
over a dimension of an 8 GB tensor, a pointwise chain after a GEMM): where eager beats the
Inductor fallback by more than the spread of both timings and by what a launch through
kernelpro::launch costs, the subgraph's winner is its own eager reference, behind the opaque op
so that Inductor cannot regenerate it. Then a kernelpro subgraph is never slower than eager
either.

Owns: `eager_artifact(baselines, options)` (the artifact for an eager win, or None),
`is_eager(artifact)` and `eager_kernel(subgraph)` (what such an entry runs: the subgraph's
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


def is_eager(artifact: KernelArtifact) -> bool:
    return artifact.language == LANGUAGE


def eager_artifact(
    baselines: Mapping[str, EvalResult], options: Options, log_path: str | None = None
) -> KernelArtifact | None:
    """An artifact for the eager reference when it beats the Inductor fallback clearly, else
    None (the eager fallback needs none: it runs the same ops already)."""
    eager, inductor = baselines.get("eager"), baselines.get("inductor")
    if options.fallback != "inductor" or eager is None or inductor is None:
        return None
    if not faster_beyond_spread(eager, inductor):
        return None
    if (inductor.median_ms or 0.0) - (eager.median_ms or 0.0) < options.op_min_gain_ms():
        return None
    return KernelArtifact(
        language=LANGUAGE,
        source="",
        entry="eager",
        kernel_ms=eager.median_ms,
        baselines_ms={n: r.median_ms for n, r in baselines.items() if r.ok and r.median_ms},
        provenance=Provenance(search_log=log_path),
    )


def eager_kernel(subgraph: Subgraph) -> Kernel:
    """What an eager entry runs: the subgraph's reference module (its ATen ops), called
    through kernelpro::launch (a CallableKernel is never inlined)."""
    return CallableKernel(f"aten-{subgraph.key.short()}", subgraph.module())
