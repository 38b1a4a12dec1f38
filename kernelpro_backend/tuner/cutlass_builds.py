"""CUTLASS libraries, built in the background before the searches that can use them.

A "gemm_cutlass" or "conv_cutlass" candidate (codegen/cutlass_match.py, cutlass_conv_match.py)
runs a shared library that nvcc needs 1-3 minutes to build (CUTLASS's templates), several times
a search's budget. So a search proposes such a candidate only once its libraries are built
(`ready`), and `start(seed)` queues a build for every configuration of a GEMM or convolution
seed that CUTLASS computes: background threads, at most `jobs` nvcc at once, each source once
per process. The library takes the problem's sizes at run time, so one build serves every shape
of a GEMM with the same epilogue and dtype (of a convolution with the same operator and dtype):
the next search of such a kernel, and the next run (the cubin cache keeps it), use it.

Owns: `CutlassBuilds` (`start`, `ready`, `wait`, `build` — now, for an entry to re-prove — and
`unavailable`: why this machine builds none).
Must not: search, launch or decide which GEMMs CUTLASS computes (cutlass_match.py does).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..codegen.cutlass_conv_match import conv_cutlass_specs, cutlass_convs
from ..codegen.cutlass_match import cutlass_gemm, cutlass_specs
from ..codegen.templates.cutlass import CUTLASS_TEMPLATES

log = logging.getLogger("kernelpro.cutlass")

# nvcc on CUTLASS's collective builders: 60-150 s on one core; a slow machine gets 10 minutes.
BUILD_TIMEOUT_S = 600.0


def _default_arch() -> str | None:
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        return None  # the kernel is sm_90a only: wgmma, TMA, warp specialisation
    return "sm_90a"


def _toolchain_problem() -> str | None:
    from ..runtime.cuda.compile import cutlass_include_dirs, find_nvcc

    if find_nvcc() is None:
        return "no nvcc on PATH or under CUDA_HOME"
    if not cutlass_include_dirs():
        return "no CUTLASS headers (pip install nvidia-cutlass, or set CUTLASS_PATH)"
    return None


class CutlassBuilds:
    """The background builds of one process; `jobs` 0 builds nothing (and nothing is ready)."""

    def __init__(
        self,
        library_dir: Path | None,
        jobs: int,
        *,
        arch: Callable[[], str | None] = _default_arch,
        toolchain: Callable[[], str | None] = _toolchain_problem,
        build: Callable[[str, str, Path | None], Any] | None = None,
        built: Callable[[str, str, Path | None], bool] | None = None,
    ) -> None:
        self.library_dir, self.jobs = library_dir, jobs
        self._arch, self._toolchain = arch, toolchain
        self._build, self._built = build or _compile, built or _is_built
        self._slots = threading.Semaphore(max(1, jobs))
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}
        self.failed: dict[str, str] = {}  # source -> error
        self._checked: tuple[str | None, str | None] | None = None  # (arch, why not)

    @property
    def unavailable(self) -> str | None:
        """Why this process builds no CUTLASS library (None: it can)."""
        if self._checked is None:
            arch = self._arch()
            why = None if arch else "the CUTLASS GEMM needs an sm_90 (Hopper) GPU"
            why = "cutlass_jobs is 0" if self.jobs <= 0 else why or self._toolchain()
            self._checked = (arch, why)
            if why:
                log.info("no CUTLASS GEMM candidates: %s", why)
        return self._checked[1]

    @property
    def arch(self) -> str:
        assert self.unavailable is None and self._checked is not None
        return str(self._checked[0])

    def ready(self, spec: Any) -> bool:
        """Whether `spec` can be measured now: not a CUTLASS spec, or its library is built."""
        if getattr(spec, "template", None) not in CUTLASS_TEMPLATES:
            return True
        if self.unavailable is not None:
            return False
        return all(self._built(src, self.arch, self.library_dir) for src in _spec_sources(spec))

    def start(self, seed: Any) -> int:
        """Queue the builds of every CUTLASS configuration of `seed` not built or queued yet;
        returns how many were queued now."""
        if not _specs(seed) or self.unavailable is not None:
            return 0
        queued = sum(self._queue(src) for src in _sources(seed))
        if queued:
            log.info(
                "building %d CUTLASS libraries in the background (1-3 min each, "
                "%d at once); searches propose them once built",
                queued,
                self.jobs,
            )
        return queued

    def build(self, specs: Sequence[Any], timeout_s: float | None = None) -> bool:
        """Build the libraries of these "gemm_cutlass" specs now, waiting for them (a cached
        entry about to be re-proved); True when every one is built."""
        if self.unavailable is not None:
            return False
        if sum(self._queue(src) for sp in specs for src in _spec_sources(sp)):
            log.info("building a cached CUTLASS kernel's libraries (1-3 min)")
        self.wait(timeout_s)
        return all(self.ready(s) for s in specs)

    def _queue(self, source: str) -> bool:
        with self._lock:
            if source in self._threads or self._built(source, self.arch, self.library_dir):
                return False
            thread = threading.Thread(target=self._run, args=(source,), daemon=True)
            self._threads[source] = thread
        thread.start()
        return True

    def _run(self, source: str) -> None:
        with self._slots:
            start = time.perf_counter()
            try:
                self._build(source, self.arch, self.library_dir)
            except Exception as e:  # a template that does not compile is a bug: say so
                self.failed[source] = f"{type(e).__name__}: {e}"
                log.warning("a CUTLASS GEMM library failed to build: %s", e)
                return
            log.info("CUTLASS GEMM library built in %.0f s", time.perf_counter() - start)

    def wait(self, timeout_s: float | None = None, seed: Any = None) -> bool:
        """Wait for the queued builds (with `seed`: only those of its configurations); True
        when none of them is still running."""
        sources = None if seed is None else _sources(seed)
        threads = [t for src, t in self._threads.items() if sources is None or src in sources]
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for thread in threads:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            thread.join(left)
        return not any(t.is_alive() for t in threads)

    def running(self) -> int:
        """How many builds are running or queued now."""
        return sum(t.is_alive() for t in self._threads.values())

    def building(self, seed: Any) -> int:
        """How many of `seed`'s configurations are being built now."""
        sources = _sources(seed)
        return sum(t.is_alive() for src, t in self._threads.items() if src in sources)


def _specs(seed: Any) -> list[Any]:
    """Every CUTLASS configuration of a GEMM or convolution seed."""
    return cutlass_specs(seed) + conv_cutlass_specs(seed)


def _spec_sources(spec: Any) -> list[str]:
    """The libraries' sources a CUTLASS spec runs (a conv backward's: dgrad and wgrad)."""
    if spec.template == "gemm_cutlass":
        return [cutlass_gemm(spec).source_text()]
    return [config.source_text() for config in cutlass_convs(spec)]


def _sources(seed: Any) -> list[str]:
    """The sources of every CUTLASS configuration of a GEMM or convolution seed, once each,
    the default configuration's first (built first)."""
    return list(dict.fromkeys(src for spec in _specs(seed) for src in _spec_sources(spec)))


def _compile(source: str, arch: str, library_dir: Path | None) -> Path:
    from ..runtime.cuda.host import compile_library

    return compile_library(source, arch, library_dir=library_dir, timeout_s=BUILD_TIMEOUT_S)


def _is_built(source: str, arch: str, library_dir: Path | None) -> bool:
    from ..runtime.cuda.host import is_built

    return is_built(source, arch, library_dir)
