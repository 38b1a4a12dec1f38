"""CUDA C++ with a host entry point (a CUTLASS 3 GEMM builds its TMA descriptors on the host):
compiled by nvcc into a shared library, cached on disk, loaded with ctypes, called on torch
tensors on the current stream.

Owns: `compile_library` (nvcc -shared into the cubin cache, compile.compiled_path,
through built.py: a library is loaded only if its bytes hash to the digest recorded when this
kernelpro built it; anything else found there, a planted library whose constructors would run
on load included, is refused and built again), `library_path` (the cache name a source's
library is recorded under) and `is_built`, `HostGemm` (the callable over `kp_gemm_run` of
codegen/templates/cutlass.py: checks operands, sizes the workspace once per shape, raises
`CandidateLoadError`-family errors with the entry point's meaning of its return codes),
`library_gemm` (the HostGemm of a source, built on first use, one per process and source; what
a "gemm_cutlass" module calls) and `use_library_dir` (the process's library cache: a search
worker's is its setup's cubin root).
Must not: write sources (codegen does) or decide which subgraph runs it. Only sources rendered
by kernelpro's own templates are compiled here: a shared library runs in the process that
loads it, as the search's isolated workers do first.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ...paths import CUBIN_DIR_ENV
from ..errors import CandidateLoadError
from .built import read_built, store_built
from .compile import (
    NVCC_TIMEOUT_S,
    CudaCompileError,
    compiled_path,
    cutlass_include_dirs,
    find_nvcc,
    nvcc_version,
    run_nvcc,
)

RUN_ERRORS = {
    1: "the problem does not fit this kernel (alignment: rows of 16 bytes; sizes)",
    2: "CUTLASS could not initialise the kernel's parameters",
    3: "CUTLASS could not launch the kernel",
}


def library_flags(arch: str, source: str = "") -> tuple[str, ...]:
    """nvcc's flags for `source`'s library; a convolution's also name CUTLASS's util headers
    (its conv collectives include them; a GEMM's flags, and so its cached names, stay)."""
    flags = ["-shared", "-Xcompiler", "-fPIC", f"-arch={arch}", "-O3", "-std=c++17"]
    flags += ["--expt-relaxed-constexpr", "-DNDEBUG", "-lineinfo"]
    dirs = cutlass_include_dirs()
    if '#include "cutlass/conv/' in source:
        dirs += cutlass_include_dirs(util=True)
    return tuple(flags + [f"-I{d}" for d in dirs])


log = logging.getLogger("kernelpro")
_SYMBOLS = ("kp_gemm_workspace", "kp_gemm_run")  # HostGemm calls these
_LIBRARY_DIR: list[Path | None] = [None]  # None: the default layout's cubin root
_LOADED: dict[tuple[str, Path | None], HostGemm] = {}  # by source and library dir


def use_library_dir(directory: str | os.PathLike[str] | None) -> None:
    """Build and look up this process's shared libraries under `directory`."""
    _LIBRARY_DIR[0] = None if directory is None else Path(directory)


def library_path(source: str, arch: str, library_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cache name `source`'s library for `arch` is recorded under (built.py), built or not."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise CudaCompileError("no nvcc: a CUDA C++ kernel with a host entry point needs nvcc")
    root = library_dir if library_dir is not None else _LIBRARY_DIR[0]
    return compiled_path(source, arch, nvcc_version(nvcc), library_flags(arch, source), root, ".so")


def library_gemm(source: str, *, bias: bool, source_term: bool) -> HostGemm:
    """The HostGemm of a codegen/templates/cutlass.py source on the current GPU, its library
    built now if the cache lacks it (minutes: searches propose only built ones,
    tuner/cutlass_builds.py)."""
    key = (source, _LIBRARY_DIR[0])
    if key not in _LOADED:  # checked before anything else: the timed call lands here
        path = current_library(source, _SYMBOLS, "GEMM")
        _LOADED[key] = HostGemm(path, bias=bias, source=source_term)
    return _LOADED[key]


def current_library(source: str, symbols: Sequence[str], what: str) -> Path:
    """`source`'s library for the current GPU in this process's library dir, built now (with a
    warning: minutes of nvcc) where the cache lacks it; `what` names the kernel in the log."""
    from .driver import current_arch

    arch, library_dir = current_arch(), _LIBRARY_DIR[0]
    if not is_built(source, arch, library_dir):  # a cache whose libraries went
        log.warning(
            "building the CUDA library of a CUTLASS %s kernel now (nvcc, 1-3 minutes, once "
            "per machine and cache)",
            what,
        )
    return compile_library(source, arch, library_dir=library_dir, symbols=symbols)


def is_built(source: str, arch: str, library_dir: str | os.PathLike[str] | None = None) -> bool:
    """Whether `source`'s library for `arch` is built, by this kernelpro (built.py)."""
    return read_built(library_path(source, arch, library_dir)) is not None


def compile_library(
    source: str,
    arch: str,
    *,
    library_dir: str | os.PathLike[str] | None = None,
    timeout_s: float = NVCC_TIMEOUT_S * 2,
    symbols: Sequence[str] = (),
) -> Path:
    """The shared library of `source` for `arch` (e.g. "sm_90a"), from the cache if this
    kernelpro built it, else built now; each of `symbols` must be exported (extern "C"). Raises
    CudaCompileError."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise CudaCompileError(
            "no nvcc: a CUDA C++ kernel with a host entry point needs nvcc (PATH or CUDA_HOME)"
        )
    if not cutlass_include_dirs():
        raise CudaCompileError(
            "no CUTLASS headers: pip install nvidia-cutlass (or set CUTLASS_PATH)"
        )
    flags = library_flags(arch, source)
    name = library_path(source, arch, library_dir)
    found = read_built(name)
    if found is None:
        data = run_nvcc(nvcc, source, flags, timeout_s, output="kernel.so")
        try:
            found = store_built(name, data), data
        except OSError as e:
            raise CudaCompileError(
                f"cannot keep the library in {name.parent} ({e}): set {CUBIN_DIR_ENV} to a "
                "directory of your own"
            ) from e
    path, data = found
    missing = [s for s in symbols if s.encode() + b"\0" not in data]
    if missing:
        raise CudaCompileError(
            f'symbol(s) {", ".join(missing)} not exported by the library: declare them extern "C"'
        )
    return path


def _leading(t: torch.Tensor, name: str, rows: bool) -> int:
    """The stride the kernel takes for operand `t` [rows, K]: its rows' (K contiguous) or its
    columns' (the rows' dim contiguous), as the kernel was built."""
    if rows:
        if t.stride(1) != 1:
            raise CandidateLoadError(f"{name}'s rows must be contiguous, strides {t.stride()}")
        return int(t.stride(0))
    if t.stride(0) != 1:
        raise CandidateLoadError(f"{name}'s columns must be contiguous, strides {t.stride()}")
    return int(t.stride(1))


class HostGemm:
    """D = act(A @ B^T (+ bias) (+ C)) through a library built from codegen/templates/cutlass.py."""

    def __init__(self, library: Path, *, bias: bool, source: bool) -> None:
        self.library = ctypes.CDLL(str(library))
        self.bias, self.source = bias, source
        self._run = self.library.kp_gemm_run
        self._run.restype = ctypes.c_int
        ptr, i32, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
        self._run.argtypes = [ptr] * 5 + [i32] * 3 + [i64] * 4 + [ptr, i32, ptr]
        # bit 0: A's M dim contiguous (else K); bit 1: B's N (else K); older sources: K and K
        layout = getattr(self.library, "kp_gemm_layout", None)
        code = int(layout()) if layout is not None else 0
        self.a_major, self.b_major = ("m" if code & 1 else "k"), ("n" if code & 2 else "k")
        self._workspace_size = self.library.kp_gemm_workspace
        self._workspace_size.restype = ctypes.c_size_t
        self._workspace_size.argtypes = [i32] * 4
        self._workspaces: dict[tuple[int, int, int, Any], torch.Tensor] = {}

    def __call__(
        self,
        a: torch.Tensor,
        b: torch.Tensor,
        bias: torch.Tensor | None = None,
        c: torch.Tensor | None = None,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """a [M, K], b [N, K] (a Linear's weight), bias [N], c [M, N]; c and out with rows
        contiguous, a and b with the dims contiguous the kernel was built for."""
        (m, k), (n, k2) = a.shape, b.shape
        if k2 != k or (bias is None) == self.bias or (c is None) == self.source:
            raise CandidateLoadError(
                f"operands {tuple(a.shape)} @ {tuple(b.shape)}^T with bias={bias is not None}, "
                f"c={c is not None} do not match the kernel (bias={self.bias}, c={self.source})"
            )
        for name, t in (("c", c), ("out", out)):
            if t is not None and t.stride(-1) != 1:
                raise CandidateLoadError(f"{name}'s rows must be contiguous, strides {t.stride()}")
        lda, ldb = _leading(a, "a", self.a_major == "k"), _leading(b, "b", self.b_major == "k")
        d = out if out is not None else torch.empty(m, n, dtype=a.dtype, device=a.device)
        sms = torch.cuda.get_device_properties(a.device).multi_processor_count
        workspace = self._workspace(m, n, k, sms, a.device)
        stream = torch.cuda.current_stream(a.device).cuda_stream
        code = self._run(
            a.data_ptr(), b.data_ptr(), bias.data_ptr() if bias is not None else None,
            c.data_ptr() if c is not None else None, d.data_ptr(), m, n, k,
            lda, ldb, c.stride(0) if c is not None else n, d.stride(0),
            workspace.data_ptr() if workspace.numel() else None, sms, stream,
        )  # fmt: skip
        if code:
            raise CandidateLoadError(f"kp_gemm_run returned {code}: {RUN_ERRORS.get(code, '?')}")
        return d

    def _workspace(self, m: int, n: int, k: int, sms: int, device: Any) -> torch.Tensor:
        key = (m, n, k, device)
        if key not in self._workspaces:
            size = int(self._workspace_size(m, n, k, sms))
            self._workspaces[key] = torch.empty(size, dtype=torch.uint8, device=device)
        return self._workspaces[key]
