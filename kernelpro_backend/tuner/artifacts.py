"""Every conversion between a search's candidates, the cache's artifacts and runnable kernels.

Owns: `winner_fields` (candidate -> artifact fields: rendered source, spec, cubin),
`load_artifact` (artifact -> the callable a cache hit runs, from exactly the bytes that were
proved) and `artifact_candidate` (artifact -> what the isolated evaluator runs: the same
stored bytes, so `kernelpro cache verify` proves what a hit runs).
Must not: decide whether an artifact is used (finder.py does) or store anything.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..cache.artifact import KernelArtifact
from ..codegen.templates.cutlass import CUTLASS_TEMPLATES
from ..rewrite.providers import CallableKernel, Kernel
from ..runtime.candidate import BaselineCandidate, Candidate, SourceCandidate, SpecCandidate

# Turns a cached artifact into a callable kernel (inputs/outputs in canonical order). May raise
# if the artifact cannot be loaded here; the subgraph then runs on the fallback.
Loader = Callable[[KernelArtifact], Kernel]


def load_artifact(artifact: KernelArtifact) -> Kernel:
    """A cached kernel as a callable, from exactly what was proved and timed. Spec-built Triton
    kernels run their stored source (never a re-rendering by templates that may have changed
    since; traceable, so Inductor can inline them); free-form Triton source is imported; CUDA
    kernels load their stored cubin through the driver API. No nvcc is needed."""
    digest = hashlib.sha256(artifact.source.encode()).hexdigest()[:12]
    if artifact.language == "cuda":
        from ..runtime.cuda.driver import load_cubin

        if artifact.binary is None:
            raise ValueError(
                "cached cuda kernel has no cubin; `kernelpro cache verify` drops entries "
                "that do not load, and a new search stores one with its cubin"
            )
        arch = artifact.launch.get("arch")
        cuda_kernel = load_cubin(artifact.source, artifact.entry, artifact.binary, arch)
        return CallableKernel(f"cuda-{artifact.entry}-{digest}", cuda_kernel)
    if artifact.spec_json is None and artifact.language == "triton":
        from ..runtime.candidate import load_kernel

        candidate = SourceCandidate("triton", artifact.source, artifact.entry)
        workdir = Path(tempfile.mkdtemp(prefix="kernelpro-artifact-"))
        fn = load_kernel(candidate, torch.nn.Identity(), workdir)
        return CallableKernel(f"triton-{artifact.entry}-{digest}", fn)
    if artifact.spec_json is None:
        raise ValueError(f"cached {artifact.language} kernel has no KernelSpec and no loader")
    from ..codegen import KernelSpec, RenderedKernel
    from ..runtime.spec_kernel import build_kernel

    rendered = RenderedKernel(artifact.language, artifact.source, artifact.entry)
    return build_kernel(KernelSpec.from_json(artifact.spec_json), rendered)


def artifact_candidate(artifact: KernelArtifact) -> Candidate:
    """The evaluator's form of a cached kernel: its KernelSpec with its stored source where
    codegen made it (built exactly as `load_artifact` builds it), else its source. A "python"
    artifact (tests) is a plain Python module defining `entry`, loaded like Triton source."""
    if artifact.language == "aten":  # tuner/eager.py: the subgraph's own ops, no code
        return BaselineCandidate("eager")
    if artifact.language == "cuda" and artifact.binary is not None:
        # The stored cubin, loaded as a hit loads it: the bytes proved are the bytes that run.
        arch = artifact.launch.get("arch")
        return SourceCandidate(
            "cuda", artifact.source, artifact.entry, cubin=artifact.binary,
            arch=arch if isinstance(arch, str) else None,
        )  # fmt: skip
    if artifact.spec_json is not None:
        return SpecCandidate(artifact.spec_json, artifact.source, artifact.entry)
    if artifact.language in ("triton", "python"):
        return SourceCandidate("triton", artifact.source, artifact.entry)
    raise ValueError(
        f"the evaluator cannot run {artifact.language} kernels without a KernelSpec; "
        "re-run the search to replace this entry"
    )


def winner_fields(
    winner: Any, render: Any = None, device: Any = None, cubin_dir: Path | None = None
) -> dict[str, Any]:
    """The artifact fields of a winning candidate: a KernelSpec is rendered; free-form source
    is stored as written, and a CUDA winner also stores its cubin for `device` (default: the
    current one; from the cubin cache `cubin_dir` the workers filled) and its launch metadata,
    so a cache hit loads without a compiler."""
    if isinstance(winner, SourceCandidate):
        fields: dict[str, Any] = {
            "language": winner.language,
            "source": winner.source,
            "entry": winner.entry,
        }
        if winner.language == "cuda":
            from ..runtime.cuda.driver import cubin_artifact_fields

            fields.update(cubin_artifact_fields(winner.source, winner.entry, device, cubin_dir))
        return fields
    if render is None:
        from ..codegen import render
    rendered = render(winner)
    fields = {
        "language": rendered.language,
        "source": rendered.source,
        "entry": rendered.entry,
        "spec_json": winner.to_json(),
    }
    if rendered.language == "cuda":  # a CUDA template: the cubin is stored, as for free-form
        from ..runtime.cuda.driver import cubin_artifact_fields

        fields.update(cubin_artifact_fields(rendered.source, rendered.entry, device, cubin_dir))
    return fields


def surcharge_ms(artifact: KernelArtifact) -> float:
    """What a cached kernel must save beyond its launch path's minimum gain for a host path
    slower than a Triton launch's (a CUTLASS call: codegen's `host_surcharge_ms`)."""
    if artifact.kernel_ms is None or artifact.template not in CUTLASS_TEMPLATES:
        return 0.0
    from ..codegen import KernelSpec, host_surcharge_ms

    return host_surcharge_ms(KernelSpec.from_json(str(artifact.spec_json)), artifact.kernel_ms)
