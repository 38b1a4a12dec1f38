"""The worker's side of the GPU hand-off: one candidate at a time runs on the GPU (clean
timings) while the other workers load and compile.

Owns: `PoolGpuLock` (the GPU asked for and given back over the worker's pipe; pool.py grants
it) and `holding_gpu` (hold it for a block, timed as the "gpu_wait" phase, cached memory
returned before it is given back).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

import torch

from .phases import Phases


class PoolGpuLock:
    """The pool's GPU, asked for and given back over the worker's pipe: the pool grants it
    to one worker at a time and takes it back from a worker that dies holding it (a lock
    shared between processes would stay locked)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def acquire(self) -> None:
        self.conn.send(("gpu", "acquire"))
        reply = self.conn.recv()
        if reply != ("gpu", "granted"):
            raise RuntimeError(f"the pool answered {reply!r} to a GPU request")

    def release(self) -> None:
        self.conn.send(("gpu", "release"))


@contextlib.contextmanager
def holding_gpu(lock: Any, phases: Phases) -> Iterator[None]:
    """The pool's GPU lock, so that one candidate at a time runs on the GPU (clean timings)
    while the other workers load and compile; the wait is the "gpu_wait" phase."""
    if lock is None:
        yield
        return
    with phases("gpu_wait"):
        lock.acquire()
    try:
        yield
    finally:
        if torch.cuda.is_available():
            # Return this job's memory before the next worker gets the GPU (after the lock
            # it was still cached here while the next one allocated: an OOM seen on H100).
            torch.cuda.empty_cache()
        lock.release()
