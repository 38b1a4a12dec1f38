"""Compile one bench workload under one mode in a child process with a time limit, so that a
slow compile (max-autotune: 23-375 s per training workload on the H100) fills Inductor's
on-disk caches before the bench compiles it in-process, where it cannot be interrupted.

A child that finishes leaves the compiled graph in the FX graph cache: the bench's own compile
of the same workload and mode then loads it in seconds. A child that runs out of time is
killed with its compile workers, and the bench leaves that mode out of that workload only —
the other modes of the workload are still timed side by side (scripts/gpu_bench.py
`--precompile-limit-s`).

    python -m kernelpro_backend.bench.precompile WORKLOAD MODE [--size full] [--dtype auto]

Owns: the child process, its time limit and its one-line verdict. Must not: time anything (the
bench times the mode afterwards, in its own process).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def precompile(
    name: str, mode: str, size: str, dtype: str, limit_s: float, device: str = "cuda"
) -> tuple[float, str | None]:
    """(seconds the child took, None) when it compiled and ran `name` under `mode` within
    `limit_s`, else (seconds, why not in one line)."""
    cmd = [sys.executable, "-m", __name__, name, mode, "--size", size, "--dtype", dtype]
    cmd += ["--device", device]
    t0 = time.perf_counter()
    root = str(Path(__file__).resolve().parents[2])  # this kernelpro, installed or not
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        env=env,
    )  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the child and its compile workers
        proc.communicate()
        return limit_s, f"still compiling after {limit_s:.0f} s in a child process: left out"
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        last = (out or "").strip().splitlines()[-1:] or ["no output"]
        return seconds, f"the child's compile failed (exit {proc.returncode}): {last[0][:300]}"
    print(f"[precompile] {name} {mode}: {seconds:.0f} s", file=sys.stderr)
    return seconds, None


def main(argv: list[str]) -> int:
    """The child: `WORKLOAD MODE --size S --dtype D --device DEV`, as `precompile` starts it (an
    internal protocol: no argument parsing beyond it)."""
    import torch

    from .modes import make_modes
    from .runner import prepare_mode
    from .workloads import DTYPES, WORKLOADS

    name, mode, *rest = argv
    flags = dict(zip(rest[::2], rest[1::2], strict=True))
    dtype = None if flags["--dtype"] == "auto" else DTYPES[flags["--dtype"]]
    workload = WORKLOADS[name](torch.device(flags["--device"]), dtype, flags["--size"])
    (found,) = [m for m in make_modes([mode]) if m.name == mode]
    prepare_mode(workload, found)  # compiles the step and runs it once
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
