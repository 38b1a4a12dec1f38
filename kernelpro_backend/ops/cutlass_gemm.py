"""`kernelpro::cutlass_gemm`: the CUTLASS 3 GEMM as a torch custom op, so that a "gemm_cutlass"
kernel is traced into Inductor's graph and called from its generated code like an extern
kernel, instead of running behind the opaque kernelpro::launch (~80 us of host time a call).

`cutlass_gemm(a, b, bias, c, digest)`: D [M, N] = act(a [M, K] @ b [N, K]^T (+ bias) (+ c)),
rows contiguous, through the shared library of the CUDA C++ source registered under `digest`
(runtime/cuda/host.library_gemm builds or loads it). A generated module registers its source
when it is imported (`register`), before any graph can hold a call to it: the backend loads a
kernel's module to trace it.

Owns: the op, its fake (shape) implementation, `register(source) -> digest` and `source_of`
(the registry both CUTLASS ops read).
Must not: render sources (codegen/cutlass_match.py does) or compile them (runtime/cuda/host.py).
"""

from __future__ import annotations

import hashlib

import torch

from ..runtime.cuda.host import library_gemm
from .fast_op import fast_op

_SOURCES: dict[str, str] = {}


def register(source: str) -> str:
    """The digest a module passes to the op for `source` (this process's registry, shared
    with kernelpro::cutlass_conv)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:32]
    _SOURCES[digest] = source
    return digest


def source_of(digest: str, op: str) -> str:
    """The CUDA C++ registered under `digest`; a clear error where none was (`op` names it)."""
    source = _SOURCES.get(digest)
    if source is None:
        raise RuntimeError(
            f"{op}: no CUTLASS source {digest} in this process; its kernel's module registers "
            "it when loaded"
        )
    return source


@fast_op("kernelpro::cutlass_gemm")
def cutlass_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    c: torch.Tensor | None,
    digest: str,
) -> torch.Tensor:
    source = source_of(digest, "kernelpro::cutlass_gemm")
    gemm = library_gemm(source, bias=bias is not None, source_term=c is not None)
    return gemm(a, b, bias, c, a.new_empty((a.shape[0], b.shape[0])))


@cutlass_gemm.register_fake
def _fake(a, b, bias, c, digest):  # type: ignore[no-untyped-def]
    return a.new_empty((a.shape[0], b.shape[0]))
