"""What the evaluator can run: candidate kernels as data, and turning them into callables.

Owns: `SourceCandidate` (free-form source from a proposer or a test), `SpecCandidate` (a codegen
`KernelSpec` as JSON), `BaselineCandidate` ("eager": the reference module itself; "inductor":
`torch.compile` of it with the options of the user's graph, fallback.py), and `load_kernel`,
which runs only inside a worker process.
Must not: validate or time anything (validate.py and timing.py do), or decide what to try.

A candidate is data: frozen, picklable and small, so that it crosses to a worker process and
into the search log unchanged.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Union

import torch

from .errors import CandidateLoadError

__all__ = ["CandidateLoadError"]  # re-exported: callers catch it from here

LANGUAGES = ("triton", "cuda")
BASELINES = ("eager", "inductor")

KernelFn = Callable[..., Sequence[torch.Tensor]]


@dataclasses.dataclass(frozen=True)
class SourceCandidate:
    """Free-form kernel source.

    For "triton", `source` is a Python module (it may import torch and triton and define
    @triton.jit kernels) defining a function named `entry` that takes the subgraph inputs in
    canonical order and returns the outputs in canonical order, as fresh tensors.
    For "cuda", `source` is CUDA C++ with `extern "C" __global__` kernels and one
    `/* kernelpro-launch {...} */` header saying how to launch them, and `entry` names the
    first kernel launched: the contract is in cuda/source.py. A cached CUDA kernel carries its
    stored `cubin` (and the `arch` it was built for): the worker loads exactly those bytes, as
    a cache hit does, instead of compiling the source."""

    language: str
    source: str
    entry: str
    cubin: bytes | None = None
    arch: str | None = None

    def __post_init__(self) -> None:
        if self.language not in LANGUAGES:
            raise ValueError(f"language must be one of {LANGUAGES}, got {self.language!r}")
        if self.cubin is not None and self.language != "cuda":
            raise ValueError("only a cuda candidate carries a cubin")

    def describe(self) -> dict[str, Any]:
        digest = hashlib.sha256(self.source.encode()).hexdigest()[:12]
        out = {"kind": "source", "language": self.language, "entry": self.entry, "sha": digest}
        if self.cubin is not None:
            out["cubin_sha"] = hashlib.sha256(self.cubin).hexdigest()[:12]
        return out


@dataclasses.dataclass(frozen=True)
class SpecCandidate:
    """A codegen `KernelSpec`, carried as its JSON text and built inside the worker. With
    `source` (a cached entry's stored, rendered module), that source is what runs, exactly
    as a cache hit runs it, rather than today's rendering of the spec."""

    spec_json: str
    source: str | None = None
    entry: str | None = None

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": "spec", "spec": self.spec_json}
        if self.source is not None:
            out["sha"] = hashlib.sha256(self.source.encode()).hexdigest()[:12]
        return out


@dataclasses.dataclass(frozen=True)
class BaselineCandidate:
    """What PyTorch would run for the subgraph: "eager" or "inductor"."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in BASELINES:
            raise ValueError(f"baseline must be one of {BASELINES}, got {self.name!r}")

    def describe(self) -> dict[str, Any]:
        return {"kind": "baseline", "name": self.name}


Candidate = Union[SourceCandidate, SpecCandidate, BaselineCandidate]


def as_candidate(candidate: object) -> Candidate:
    """Accept a candidate, or a codegen KernelSpec (anything with `to_json`), as a Candidate."""
    if isinstance(candidate, (SourceCandidate, SpecCandidate, BaselineCandidate)):
        return candidate
    to_json = getattr(candidate, "to_json", None)
    if callable(to_json):
        return SpecCandidate(str(to_json()))
    raise TypeError(
        f"cannot evaluate a {type(candidate).__name__}: pass a SourceCandidate, "
        "a SpecCandidate, a BaselineCandidate or a codegen KernelSpec"
    )


def load_kernel(
    candidate: Candidate,
    reference: torch.nn.Module,
    workdir: Path,
    *,
    cubin_dir: Path | None = None,
    nvcc_timeout_s: float | None = None,
    inductor_options: dict[str, Any] | None = None,
) -> KernelFn:
    """The candidate as a callable. Raises CandidateLoadError when it cannot be built.
    `cubin_dir`, `nvcc_timeout_s`: where a CUDA candidate's cubin is cached and how long its
    compile may take (None: cuda/compile.py's defaults). `inductor_options`: Inductor's config
    for the "inductor" baseline as the user's graph has it (fallback.py; None: the defaults)."""
    if isinstance(candidate, BaselineCandidate):
        if candidate.name == "eager":
            return reference
        return torch.compile(  # type: ignore[return-value]
            reference, backend="inductor", options=inductor_options or None
        )
    if isinstance(candidate, SpecCandidate):
        return _load_spec(candidate, cubin_dir, nvcc_timeout_s)
    if candidate.language == "triton":
        return _load_python_module(candidate, workdir)
    # Imported here: the driver API bindings are needed only for CUDA candidates.
    from .cuda.driver import load_cubin, load_cuda_source

    if candidate.cubin is not None:
        return load_cubin(candidate.source, candidate.entry, candidate.cubin, candidate.arch)
    return load_cuda_source(
        candidate.source, candidate.entry, cubin_dir=cubin_dir, timeout_s=nvcc_timeout_s
    )


def _load_spec(
    candidate: SpecCandidate, cubin_dir: Path | None, nvcc_timeout_s: float | None
) -> KernelFn:
    try:
        # Imported lazily: codegen is its own package and a worker may run without it.
        from ..codegen import CUDA_TEMPLATES, KernelSpec, RenderedKernel, render
        from .spec_kernel import build_kernel

        spec = KernelSpec.from_json(candidate.spec_json)
        if candidate.source is None:
            rendered = render(spec)
        else:  # the stored source, in the language its template renders to
            language = "cuda" if spec.template in CUDA_TEMPLATES else "triton"
            rendered = RenderedKernel(language, candidate.source, candidate.entry or "entry")
        return build_kernel(spec, rendered, cubin_dir=cubin_dir, nvcc_timeout_s=nvcc_timeout_s)
    except CandidateLoadError:
        raise
    except Exception as e:
        raise CandidateLoadError(f"building the KernelSpec failed: {type(e).__name__}: {e}") from e


def _load_python_module(candidate: SourceCandidate, workdir: Path) -> KernelFn:
    # Triton's @jit reads the kernel's source through `inspect`, so the module must live in a
    # real file rather than be exec'd from a string.
    digest = hashlib.sha256(candidate.source.encode()).hexdigest()[:16]
    name = f"kernelpro_candidate_{digest}"
    path = workdir / f"{name}.py"
    path.write_text(candidate.source)
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except Exception as e:
        raise CandidateLoadError(
            f"the candidate module does not import: {type(e).__name__}: {e}"
        ) from e
    fn = getattr(module, candidate.entry, None)
    if not callable(fn):
        raise CandidateLoadError(
            f"the candidate module defines no function named {candidate.entry!r}"
        )
    return fn  # type: ignore[no-any-return]
