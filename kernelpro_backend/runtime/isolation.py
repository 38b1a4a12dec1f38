"""What a worker process gets of the user's environment: the least its work needs.

A worker loads code that did not come from this user: LLM proposals, and entries from bundles
or other machines on their first proof (a free-form source is still Python that Triton
imports). So it is started with an environment built from an allow-list, not inherited: API
keys, cloud credentials, tokens and agent sockets stay in the user's process (not even the
worker's /proc/self/environ holds them), and it works in a fresh temporary directory of its own,
not in the user's working directory.

Kept (`worker_environ`), and why:
- PATH, LD_LIBRARY_PATH, CUDA_*, NVIDIA_*, CUTLASS_PATH, CC, CXX: finding nvcc, the driver, the
  CUDA libraries and the C compiler Triton builds its launcher with;
- TRITON_*, TORCH_*, TORCHINDUCTOR_*, PYTORCH_*, KERNELPRO_*, OMP_*, MKL_*: settings of the
  libraries the worker runs (the interpreter switch, allocator settings, thread counts);
- PYTHONPATH, PYTHONHASHSEED, VIRTUAL_ENV, CONDA_PREFIX: importing the same packages;
- HOME, USER, LOGNAME, XDG_CACHE_HOME, TMPDIR, LANG, LC_*: where per-user caches live (Triton's
  ~/.triton, Inductor's /tmp/torchinductor_$USER) and the locale; none is a secret.
Everything else is dropped. The residual risk: the worker still runs as the user, so code in it
can read the user's files; only a proved kernel ever runs in the user's process, and
`require_signed_bundles` keeps unsigned outside code from reaching a worker at all.

Owns: `worker_environ(environ)`, `IsolatedProcess` (a "spawn" process started with that
environment) and `enter_workdir(path)`.
Must not: decide what a worker runs (pool.py, worker.py).
"""

from __future__ import annotations

import io
import os
import subprocess
from collections.abc import Mapping
from multiprocessing import context, popen_spawn_posix, reduction, spawn, util
from typing import Any

KEPT_NAMES = frozenset(
    {
        "PATH", "LD_LIBRARY_PATH", "CUTLASS_PATH", "CC", "CXX", "PYTHONPATH", "PYTHONHASHSEED",
        "VIRTUAL_ENV", "CONDA_PREFIX", "HOME", "USER", "LOGNAME", "XDG_CACHE_HOME", "TMPDIR",
        "LANG",
    }
)  # fmt: skip
KEPT_PREFIXES = (
    "CUDA_", "NVIDIA_", "TRITON_", "TORCH_", "TORCHINDUCTOR_", "PYTORCH_", "KERNELPRO_", "OMP_",
    "MKL_", "LC_",
)  # fmt: skip


def worker_environ(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed part of `environ` (default: this process's)."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items() if k in KEPT_NAMES or k.startswith(KEPT_PREFIXES)}


def enter_workdir(path: str | os.PathLike[str]) -> None:
    """Make `path` (a fresh directory of the worker's own) its working directory: a relative
    path in loaded code lands there, not in the user's project."""
    os.chdir(path)


class _Popen(popen_spawn_posix.Popen):
    """multiprocessing's "spawn" launch with one change: the child's environment is
    `worker_environ()`, passed to exec, instead of the parent's."""

    def _launch(self, process_obj: Any) -> None:
        from multiprocessing import resource_tracker

        fds: list[int] = self._fds  # type: ignore[attr-defined]
        tracker_fd = resource_tracker.getfd()
        if tracker_fd is not None:
            fds.append(tracker_fd)
        prep_data = spawn.get_preparation_data(process_obj._name)
        fp = io.BytesIO()
        context.set_spawning_popen(self)
        try:
            reduction.dump(prep_data, fp)
            reduction.dump(process_obj, fp)
        finally:
            context.set_spawning_popen(None)
        parent_r = child_w = child_r = parent_w = None
        try:
            parent_r, child_w = os.pipe()
            child_r, parent_w = os.pipe()
            cmd = spawn.get_command_line(tracker_fd=tracker_fd, pipe_handle=child_r)
            fds.extend([child_r, child_w])
            child = subprocess.Popen(  # noqa: S603 - this interpreter, multiprocessing's command
                cmd,
                executable=spawn.get_executable(),
                pass_fds=sorted(set(fds)),
                env=worker_environ(),
            )
            # multiprocessing waits for the child (os.waitpid): subprocess must never reap it.
            child.returncode = 0
            self.pid = child.pid
            self.sentinel = parent_r
            with open(parent_w, "wb", closefd=False) as f:
                f.write(fp.getbuffer())
        finally:
            fds_to_close = [fd for fd in (parent_r, parent_w) if fd is not None]
            self.finalizer = util.Finalize(self, util.close_fds, fds_to_close)  # type: ignore[attr-defined]
            for fd in (child_r, child_w):
                if fd is not None:
                    os.close(fd)


class IsolatedProcess(context.SpawnProcess):
    """A "spawn" process whose environment is `worker_environ()`."""

    @staticmethod
    def _Popen(process_obj: Any) -> Any:  # noqa: N802 - multiprocessing's name
        return _Popen(process_obj)
