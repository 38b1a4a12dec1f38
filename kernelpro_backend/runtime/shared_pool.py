"""One worker pool per process, kept across subgraphs and compiles.

Owns: `lease_pool(workers, timeout_s, idle_s, setup, start_timeout_s)`, a context manager that
hands out the process's pool (started on first use: warm CUDA contexts, torch and Triton
imported once), `prestart_pool(...)` (start it now, without waiting, so its start overlaps the
caller's own work) and `release_pool()`. The pool is shut down when it has been idle for `idle_s`
seconds, at exit, or when a caller asks for a different number of workers or another
`WorkerSetup` (another cache directory or compile limit).
Must not: evaluate anything itself (pool.py does) or decide what to evaluate.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import time
from collections.abc import Iterator

from .pool import START_TIMEOUT_S, WorkerPool
from .worker_setup import WorkerSetup

log = logging.getLogger("kernelpro")


class _Keeper:
    """The process's pool, its users and its idle timer."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pool: WorkerPool | None = None
        self.users = 0
        self.last_used = time.monotonic()
        self.timer: threading.Timer | None = None
        self.unleased = False  # the pool was started (perhaps by prestart) and not yet leased

    def get(
        self,
        workers: int,
        timeout_s: float,
        setup: WorkerSetup | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
        lease: bool = True,
    ) -> tuple[WorkerPool, bool]:
        """The pool, and whether this is its first lease (which reports its start time)."""
        with self.lock:
            pool = self.pool
            changed = pool is not None and (
                pool.closed or pool.size != workers or (setup is not None and pool.setup != setup)
            )
            if changed and self.users == 0 and pool is not None:
                pool.close()  # a pool in use by another search keeps its size and setup
                self.pool = None
            if self.pool is None:
                self.pool = WorkerPool(
                    workers=workers,
                    timeout_s=timeout_s,
                    setup=setup,
                    start_timeout_s=start_timeout_s,
                )
                self.unleased = True
            fresh, self.unleased = self.unleased, self.unleased and not lease
            self.pool.timeout_s = timeout_s
            self.users += 1
            return self.pool, fresh

    def put(self, idle_s: float) -> None:
        with self.lock:
            self.users -= 1
            self.last_used = time.monotonic()
            if self.timer is not None:
                self.timer.cancel()
            self.timer = threading.Timer(idle_s, self.close_if_idle, args=(idle_s,))
            self.timer.daemon = True
            self.timer.start()

    def close_if_idle(self, idle_s: float) -> None:
        with self.lock:
            idle = time.monotonic() - self.last_used
            if self.pool is not None and self.users == 0 and idle >= idle_s * 0.99:
                log.info("worker pool idle for %.0f s: shut down", idle)
                self.pool.close()
                self.pool = None

    def close(self) -> None:
        with self.lock:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            if self.pool is not None:
                self.pool.close()
                self.pool = None


_KEEPER = _Keeper()
atexit.register(_KEEPER.close)


@contextlib.contextmanager
def lease_pool(
    workers: int,
    timeout_s: float,
    idle_s: float = 300.0,
    setup: WorkerSetup | None = None,
    start_timeout_s: float = START_TIMEOUT_S,
) -> Iterator[WorkerPool]:
    """The process's pool with `workers` workers started with `setup` (WorkerSetup.of(options):
    the cache layout and compile limit), started if needed and ready when handed out.

    with lease_pool(4, timeout_s=120) as pool:
        pool.start_s  # seconds this process spent starting it (once)
    """
    pool, fresh = _KEEPER.get(workers, timeout_s, setup, start_timeout_s)
    try:
        pool.wait_ready()
        if not fresh:
            pool.start_s = 0.0  # already paid by an earlier lease
        yield pool
    finally:
        _KEEPER.put(idle_s)


def prestart_pool(
    workers: int,
    timeout_s: float,
    idle_s: float = 300.0,
    setup: WorkerSetup | None = None,
    start_timeout_s: float = START_TIMEOUT_S,
) -> None:
    """Start the pool `lease_pool` would hand out with these arguments, and return at once: its
    workers boot (CUDA context, torch and Triton imports) while the caller goes on — a warm-up
    traces and compiles the model meanwhile — and the first lease waits only for what is left.
    An idle pool is shut down after `idle_s` as usual."""
    _KEEPER.get(workers, timeout_s, setup, start_timeout_s, lease=False)
    _KEEPER.put(idle_s)


def release_pool() -> None:
    """Shut the process's pool down now (its workers and their GPU memory go)."""
    _KEEPER.close()
