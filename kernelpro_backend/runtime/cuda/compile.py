"""Compiling CUDA C++ source to a cubin, with an on-disk cubin cache.

Owns: finding a compiler (nvcc from $CUDA_HOME/bin or PATH, else NVRTC through cuda-python:
`cuda.bindings.nvrtc` or the older `cuda.nvrtc`), the flags (-std=c++17, the device's arch with
the "a" suffix from sm_90 on so wgmma/TMA compile, CUTLASS/CuTe headers from the
`nvidia-cutlass` wheel or $CUTLASS_PATH), running nvcc (`run_nvcc`), trimming compiler logs
to their useful lines (nvcc runs still going when the process exits are killed; `nvcc_paused`
stops them while something is timed), and the cubin cache (`compiled_path`, also for host.py's shared
libraries): a cubin's name is the sha256 of source + arch + flags + compiler version, its
directory `CacheLayout.cubin_root` (paths.py; private to this user, else a fresh one), read and
written through built.py, so a cubin is used only if this kernelpro built those very bytes.
Must not: load or launch cubins (driver.py), parse launch headers (source.py), or
choose where the cubin cache lives (the caller passes it; paths.py has the default).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ...paths import CacheLayout, private_or_fresh
from ..errors import CandidateLoadError
from .built import read_built, store_built

NVCC_TIMEOUT_S = 90.0  # CuTe GEMMs take 20-60 s; a worker job times out at the pool's limit
LOG_LINES = 40  # lines of compiler output kept in an error
SOURCE_NAME = "candidate.cu"


class CudaCompileError(CandidateLoadError):
    """The source did not compile; `log` holds the compiler's useful lines."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


@dataclasses.dataclass(frozen=True)
class Cubin:
    data: bytes
    arch: str  # "sm_90a"
    compiler: str  # "nvcc 13.0.88" or "nvrtc 13.0"
    flags: tuple[str, ...]
    cached: bool  # read from the cubin cache rather than compiled now
    path: Path | None = None


def arch_for_capability(major: int, minor: int) -> str:
    """sm_XY for a device; from Hopper on the arch-specific "a" target (sm_90a), which cubins
    are built for anyway (a cubin runs only on its own major version) and which wgmma/TMA need."""
    return f"sm_{major}{minor}{'a' if major >= 9 else ''}"


def find_nvcc() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and os.access(Path(home) / "bin" / "nvcc", os.X_OK):
        return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


@functools.lru_cache(maxsize=8)
def nvcc_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout
    found = re.search(r"V(\d+\.\d+\.\d+)", out)
    return f"nvcc {found.group(1) if found else 'unknown version'}"


def cutlass_include_dirs(util: bool = False) -> list[str]:
    """CUTLASS/CuTe headers: $CUTLASS_PATH/include, or the nvidia-cutlass wheel's copy; with
    `util`, CUTLASS's util headers (tools/util/include), which its conv collectives include."""
    tops = [Path(os.environ["CUTLASS_PATH"])] if os.environ.get("CUTLASS_PATH") else []
    spec = importlib.util.find_spec("cutlass_library")  # located, not imported (slow)
    if spec is not None and spec.submodule_search_locations:
        tops += [Path(root) / "source" for root in spec.submodule_search_locations]
    if util:
        dirs = [top / "tools" / "util" / "include" for top in tops]
        return [str(d) for d in dirs if (d / "cutlass" / "util").is_dir()]
    dirs = [top / "include" for top in tops]
    return [str(d) for d in dirs if (d / "cute").is_dir() or (d / "cutlass").is_dir()]


@functools.lru_cache(maxsize=1)
def cutlass_version() -> str:
    try:
        return importlib.metadata.version("nvidia-cutlass")
    except importlib.metadata.PackageNotFoundError:
        return os.environ.get("CUTLASS_PATH", "none")


def nvcc_flags(arch: str) -> tuple[str, ...]:
    flags = ["-cubin", f"-arch={arch}", "-O3", "-std=c++17", "-lineinfo"]
    flags += ["--expt-relaxed-constexpr", "-DNDEBUG"]  # CuTe needs the former
    return tuple(flags + [f"-I{d}" for d in cutlass_include_dirs()])


def trim_log(log: str, workdir: str | None = None) -> str:
    """The useful lines of a compiler log: each error with a few lines of context (source line,
    caret), the first lines of template instantiation chains, at most LOG_LINES lines."""
    if workdir:
        log = log.replace(workdir + os.sep, "")
    lines = [ln.rstrip() for ln in log.splitlines() if ln.strip()]
    keep: list[str] = []
    context = 0
    for line in lines:
        if re.search(r"\berror\b", line, re.IGNORECASE):
            keep.append(line)
            context = 3
        elif context > 0 and not line.startswith("Compilation terminated"):
            keep.append(line)
            context -= 1
    keep = keep or lines
    if len(keep) > LOG_LINES:
        keep = keep[:LOG_LINES] + [f"... ({len(keep) - LOG_LINES} more lines)"]
    return "\n".join(keep)


def _error_lines(log: str) -> list[str]:
    return [
        ln
        for ln in log.splitlines()
        if re.search(r"\berror\b", ln, re.IGNORECASE) and "detected in the compilation" not in ln
    ]


def compile_error(tool: str, log: str) -> CudaCompileError:
    errors = _error_lines(log)
    first = errors[0].strip() if errors else (log.strip().splitlines() or ["no output"])[0]
    count = f"{len(errors)} error{'s' if len(errors) != 1 else ''}" if errors else "failed"
    return CudaCompileError(f"{tool}: {count}; first: {first}\n{log}", log)


# nvcc runs (each in its own process group: nvcc, cicc, ptxas) still going; killed at exit, so
# a process that ends while background threads build (tuner/cutlass_builds.py) leaves none
_RUNNING: set[subprocess.Popen[str]] = set()
_RUNNING_LOCK = threading.Lock()


def _kill_group(proc: subprocess.Popen[str]) -> None:
    _signal_group(proc, signal.SIGKILL)


@atexit.register
def kill_running_nvcc() -> None:
    """Kill every nvcc this process started that is still running (and its children)."""
    with _RUNNING_LOCK:
        running = list(_RUNNING)
    for proc in running:
        _kill_group(proc)


# The seconds nvcc runs have spent stopped by `nvcc_paused` so far, and when the current pause
# began (0: none), so that a run's timeout counts only the time it could run.
_PAUSES: list[float] = [0.0, 0.0]
_DEPTH = [0]  # pauses open now (nested ones stop nothing)


def _paused_s() -> float:
    """Seconds nvcc runs have spent paused in this process, the current pause included."""
    with _RUNNING_LOCK:
        total, since = _PAUSES
    return total + (time.monotonic() - since if since else 0.0)


@contextlib.contextmanager
def nvcc_paused() -> Iterator[int]:
    """Stop the nvcc runs of this process (SIGSTOP to each one's process group) for the block,
    then let them go on: for timings that builds on the host's cores would disturb (the
    in-context check's rounds of a host-bound training step). Runs started inside the block
    are not held back (the caller may need one), and stopped runs' timeouts do not count the
    pause. Yields how many runs were stopped; a pause inside another (from any thread) stops
    nothing more and yields 0, and the runs go on when the outer one ends."""
    stop = getattr(signal, "SIGSTOP", None)
    with _RUNNING_LOCK:
        _DEPTH[0] += 1
        running = list(_RUNNING) if stop is not None and _DEPTH[0] == 1 else []
        if running:
            _PAUSES[1] = time.monotonic()
    for proc in running:
        _signal_group(proc, stop)  # type: ignore[arg-type]
    try:
        yield len(running)
    finally:
        for proc in running:
            _signal_group(proc, signal.SIGCONT)
        with _RUNNING_LOCK:
            _DEPTH[0] -= 1
            if running:
                _PAUSES[0] += time.monotonic() - _PAUSES[1]
                _PAUSES[1] = 0.0


def _signal_group(proc: subprocess.Popen[str], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(proc.pid, sig)


def _start(command: list[str], cwd: str) -> subprocess.Popen[str]:
    """Popen `command` in a process group of its own, registered (killed at exit, paused by
    `nvcc_paused`)."""
    with _RUNNING_LOCK:  # a pause starting now either sees this run or comes after its start
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            start_new_session=True,
        )
        _RUNNING.add(proc)
    return proc


def _communicate(proc: subprocess.Popen[str], timeout_s: float) -> tuple[str, str]:
    """`proc.communicate()` within `timeout_s` of running time (paused time not counted)."""
    end, paused = time.monotonic() + timeout_s, _paused_s()
    while True:
        left = end + (_paused_s() - paused) - time.monotonic()
        try:
            return proc.communicate(timeout=max(left, 0.05))
        except subprocess.TimeoutExpired:
            if end + (_paused_s() - paused) > time.monotonic():
                continue  # a pause moved the end: no output is lost by asking again
            raise


def run_nvcc(
    nvcc: str, source: str, flags: Sequence[str], timeout_s: float, output: str = "candidate.cubin"
) -> bytes:
    """What nvcc makes of `source` with `flags` (a cubin, or a library with -shared), in a
    fresh directory; raises CudaCompileError with the trimmed log or on a timeout."""
    with tempfile.TemporaryDirectory(prefix="kernelpro-nvcc-") as tmp:
        src, out = Path(tmp) / SOURCE_NAME, Path(tmp) / output
        src.write_text(source)
        proc = _start([nvcc, *flags, "-o", str(out), str(src)], tmp)
        try:
            stdout, stderr = _communicate(proc, timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.communicate()
            raise CudaCompileError(
                f"nvcc ran over {timeout_s:g} s: simplify the kernel (fewer template "
                "instantiations, smaller unrolls)"
            ) from None
        finally:
            with _RUNNING_LOCK:
                _RUNNING.discard(proc)
        if proc.returncode != 0 or not out.exists():
            killed = " (killed: the process is exiting)" if proc.returncode == -9 else ""
            raise compile_error("nvcc" + killed, trim_log(stdout + stderr, tmp))
        return out.read_bytes()


def _nvrtc_module() -> Any:
    try:
        from cuda.bindings import nvrtc  # cuda-python >= 12.6
    except ImportError:
        try:
            from cuda import nvrtc  # type: ignore[attr-defined,no-redef]  # older cuda-python
        except ImportError:
            return None
    return nvrtc


def _nvrtc_value(result: tuple[Any, ...], what: str) -> Any:
    err, *rest = result
    if int(err) != 0:
        raise CudaCompileError(f"NVRTC {what} failed: {err}")
    return rest[0] if len(rest) == 1 else tuple(rest)


@functools.lru_cache(maxsize=1)
def nvrtc_version() -> str | None:
    """ "nvrtc 13.0", or None without the bindings or without libnvrtc.so."""
    nvrtc = _nvrtc_module()
    if nvrtc is None:
        return None
    try:
        major, minor = _nvrtc_value(nvrtc.nvrtcVersion(), "version")
    except Exception:  # the bindings are installed but the library is not
        return None
    return f"nvrtc {major}.{minor}"


def nvrtc_flags(arch: str) -> tuple[str, ...]:
    flags = [f"--gpu-architecture={arch}", "-std=c++17", "-lineinfo", "-DNDEBUG"]
    home = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    includes = [str(Path(home) / "include"), *cutlass_include_dirs()]
    return tuple(flags + [f"-I{d}" for d in includes if Path(d).is_dir()])


def _compile_nvrtc(source: str, flags: Sequence[str]) -> bytes:
    nvrtc = _nvrtc_module()
    create = nvrtc.nvrtcCreateProgram(source.encode(), SOURCE_NAME.encode(), 0, [], [])
    program = _nvrtc_value(create, "nvrtcCreateProgram")
    try:
        options = [f.encode() for f in flags]
        (status,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
        size = _nvrtc_value(nvrtc.nvrtcGetProgramLogSize(program), "log size")
        log = b" " * int(size)  # filled in place, as cuda-python's own examples do
        nvrtc.nvrtcGetProgramLog(program, log)
        if int(status) != 0:
            raise compile_error("nvrtc", trim_log(log.decode(errors="replace").rstrip("\0 ")))
        size = _nvrtc_value(nvrtc.nvrtcGetCUBINSize(program), "cubin size")
        cubin = b" " * int(size)
        (status,) = nvrtc.nvrtcGetCUBIN(program, cubin)
        if int(status) != 0:
            raise CudaCompileError(
                f"NVRTC produced no cubin ({status}): is {flags[0]} a real arch?"
            )
        return cubin
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def compiled_path(
    source: str,
    arch: str,
    tool: str,
    flags: Sequence[str],
    root: str | os.PathLike[str] | None,
    suffix: str,
) -> Path:
    """Where what `tool` makes of `source` is cached: named by the sha256 of source, arch,
    compiler, flags and the CUTLASS headers' version (a CuTe source compiled against other
    headers is another binary), under `root` (default: paths.CacheLayout's cubin root)."""
    parts = [source, arch, tool, *flags, f"cutlass {cutlass_version()}"]
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()
    base = Path(root) if root is not None else CacheLayout.of().cubin_root
    base = private_or_fresh(base, "kernelpro-cubin-")  # nobody else may plant code there
    return CacheLayout(base.parent, base).cubin(key).with_suffix(suffix)


def compile_cuda(
    source: str,
    arch: str,
    *,
    kernels: Sequence[str] = (),
    cubin_dir: str | os.PathLike[str] | None = None,
    use_cache: bool = True,
    timeout_s: float = NVCC_TIMEOUT_S,
    compiler: str = "auto",
) -> Cubin:
    """The cubin of `source` for `arch`, from the cubin cache or compiled now by `compiler`
    ("auto": nvcc, else NVRTC; or "nvcc" / "nvrtc"). Raises CudaCompileError with the trimmed
    log; checks that each of `kernels` is a symbol of the cubin (declared extern "C").
    `cubin_dir`: the cubin cache (default: the cache directory rule's, paths.CacheLayout)."""
    if compiler not in ("auto", "nvcc", "nvrtc"):
        raise ValueError(f'compiler must be "auto", "nvcc" or "nvrtc", got {compiler!r}')
    nvcc = find_nvcc() if compiler != "nvrtc" else None
    if nvcc is not None:
        tool, flags = nvcc_version(nvcc), nvcc_flags(arch)
    elif compiler != "nvcc" and nvrtc_version() is not None:
        tool, flags = str(nvrtc_version()), nvrtc_flags(arch)
    else:
        raise CudaCompileError(
            f"no CUDA compiler ({compiler}): put nvcc on PATH (or set CUDA_HOME), or install "
            "NVRTC (pip install nvidia-cuda-nvrtc) next to cuda-python"
        )
    path = compiled_path(source, arch, tool, flags, cubin_dir, ".cubin")
    found = read_built(path) if use_cache else None
    if found is not None:
        (path, data), cached = found, True
    else:
        if nvcc is not None:
            data = run_nvcc(nvcc, source, flags, timeout_s)
        else:
            data = _compile_nvrtc(source, flags)
        cached = False
    missing = [k for k in kernels if k.encode() + b"\0" not in data]
    if missing:
        raise CudaCompileError(
            f"kernel(s) {', '.join(missing)} not found in the compiled cubin: declare each "
            'launched kernel `extern "C" __global__` with exactly that name'
        )
    if use_cache and not cached:
        try:
            path = store_built(path, data)
        except OSError:  # a read-only cache only costs a recompile next time
            path = None  # type: ignore[assignment]
    return Cubin(data, arch, tool, tuple(flags), cached, path if use_cache else None)
