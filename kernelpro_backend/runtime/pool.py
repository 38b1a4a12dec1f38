"""A pool of worker processes that evaluate candidates, isolated from the caller.

Owns: `WorkerPool`: spawning workers (multiprocessing "spawn", one CUDA context each),
dispatching jobs, the per-job timeout, and replacing a worker that died (segfault, illegal
address, os._exit) or hung, so that the caller and the other workers carry on.
Must not: look inside jobs or results beyond their status (worker.py evaluates).
"""

from __future__ import annotations

import collections
import contextlib
import multiprocessing as mp
import multiprocessing.connection as mpc
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

from .job import Job
from .result import EvalResult, EvalStatus
from .worker import worker_main

START_TIMEOUT_S = 180.0  # spawning a worker imports torch (seconds) and, on GPU, makes a context


@contextlib.contextmanager
def _main_module_hidden() -> Any:
    """Keep "spawn" from re-running the user's script in each worker.

    Spawned children import the parent's __main__ (its file, or its -m module) unless it has
    neither. A training script that calls torch.compile at top level, without an
    `if __name__ == "__main__":` guard, would then run again in every worker. Workers need
    nothing from __main__ (their target lives in kernelpro_backend), so hide it while starting.
    """
    main = sys.modules.get("__main__")
    saved: dict[str, Any] = {
        k: main.__dict__[k] for k in ("__file__", "__spec__") if main and k in main.__dict__
    }
    try:
        if main is not None:
            main.__dict__.pop("__file__", None)
            main.__dict__["__spec__"] = None
        yield
    finally:
        if main is not None:
            main.__dict__.pop("__spec__", None)
            main.__dict__.update(saved)


class _Worker:
    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.start()

    def start(self) -> None:
        self.conn, child = self.ctx.Pipe(duplex=True)
        self.process = self.ctx.Process(target=worker_main, args=(child,), daemon=True)
        with _main_module_hidden():
            self.process.start()
        child.close()
        self.ready = False
        self.started_at = time.monotonic()
        self.job: tuple[int, float] | None = None  # (job index, deadline)

    def stop(self, kill: bool = False) -> None:
        if kill:
            self.process.kill()
        else:
            with contextlib.suppress(OSError):
                self.conn.send(None)
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self.conn.close()

    def restart(self, kill: bool) -> None:
        self.stop(kill=kill)
        self.start()


def _death_message(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"the worker died from {name} while running the candidate"
    return f"the worker exited with code {exitcode} while running the candidate"


class WorkerPool:
    """Evaluates jobs in `workers` isolated processes; a job that runs over `timeout_s`
    seconds comes back TIMED_OUT and its worker is replaced.

        with WorkerPool(workers=2, timeout_s=60) as pool:
            results = pool.evaluate_many([job, *job.baselines()])
    """

    def __init__(self, workers: int = 1, timeout_s: float = 60) -> None:
        if workers < 1:
            raise ValueError(f"a pool needs at least one worker, got {workers}")
        self.timeout_s = timeout_s
        self._ctx = mp.get_context("spawn")
        self._workers = [_Worker(self._ctx) for _ in range(workers)]
        self.replaced = 0  # workers replaced after a crash or a timeout

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for w in self._workers:
            w.stop()
        self._workers = []

    def evaluate(self, job: Job) -> EvalResult:
        return self.evaluate_many([job])[0]

    def evaluate_many(self, jobs: Sequence[Job]) -> list[EvalResult]:
        """Results in the order of `jobs`."""
        if not self._workers:
            raise RuntimeError("the WorkerPool is closed; make a new one")
        pending = collections.deque(enumerate(jobs))
        results: dict[int, EvalResult] = {}
        while len(results) < len(jobs):
            for w in self._workers:
                if w.ready and w.job is None and pending:
                    index, job = pending.popleft()
                    w.conn.send((index, job))
                    w.job = (index, time.monotonic() + self.timeout_s)
            self._wait()
            for w in self._workers:
                self._collect(w, jobs, results)
        return [results[i] for i in range(len(jobs))]

    def _wait(self) -> None:
        now = time.monotonic()
        deadlines = [w.job[1] for w in self._workers if w.job is not None]
        deadlines += [w.started_at + START_TIMEOUT_S for w in self._workers if not w.ready]
        timeout = max(0.0, min(deadlines) - now) if deadlines else None
        waitables: list[Any] = [w.conn for w in self._workers]
        waitables += [w.process.sentinel for w in self._workers]
        mpc.wait(waitables, timeout)

    def _collect(self, w: _Worker, jobs: Sequence[Job], results: dict[int, EvalResult]) -> None:
        now = time.monotonic()
        if not w.ready:
            if w.conn.poll():
                try:
                    w.conn.recv()  # ("ready", pid)
                    w.ready = True
                    return
                except (EOFError, OSError):
                    pass
            if not w.process.is_alive() or now > w.started_at + START_TIMEOUT_S:
                code = w.process.exitcode
                w.stop(kill=True)
                raise RuntimeError(
                    f"a kernelpro worker failed to start (exit code {code}); run "
                    "`python -c 'import torch, kernelpro_backend'` to see the import error"
                )
            return
        if w.job is None:
            return
        index, deadline = w.job
        if w.conn.poll():
            try:
                _, result, fatal = w.conn.recv()
                results[index] = EvalResult.from_dict(result)
                w.job = None
                if fatal:
                    self._replace(w, kill=False)
                return
            except (EOFError, OSError):
                pass  # the worker died mid-reply: handled below as a crash
        if not w.process.is_alive() or w.conn.closed:
            w.process.join(1)
            results[index] = EvalResult(
                EvalStatus.CRASHED,
                message=_death_message(w.process.exitcode) + "; a new worker was started",
                details={
                    "exitcode": w.process.exitcode,
                    "subgraph": jobs[index].name,
                    "candidate": jobs[index].candidate.describe(),
                },
            )
            self._replace(w, kill=True)
        elif now >= deadline:
            results[index] = EvalResult(
                EvalStatus.TIMED_OUT,
                message=f"no result within {self.timeout_s:g} s (a hang or an endless loop); "
                "the worker was killed and replaced",
                details={
                    "timeout_s": self.timeout_s,
                    "subgraph": jobs[index].name,
                    "candidate": jobs[index].candidate.describe(),
                },
            )
            self._replace(w, kill=True)

    def _replace(self, w: _Worker, kill: bool) -> None:
        self.replaced += 1
        w.restart(kill=kill)
