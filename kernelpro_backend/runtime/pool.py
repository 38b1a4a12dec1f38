"""A pool of worker processes that evaluate candidates, isolated from the caller.

Owns: `WorkerPool`: spawning workers (multiprocessing "spawn", one CUDA context each, started
with the caller's `WorkerSetup`: cache layout and compile limit; with an allow-listed
environment, isolation.py), dispatching jobs, the start and
per-job timeouts, and replacing a worker that died (segfault, illegal
address, os._exit) or hung, so that the caller and the other workers carry on.
Must not: look inside jobs or results beyond their status (worker.py evaluates).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import multiprocessing as mp
import multiprocessing.connection as mpc
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

from ..paths import CacheLayout
from .isolation import IsolatedProcess
from .job import Job
from .result import EvalResult, EvalStatus
from .worker import worker_main
from .worker_setup import WorkerSetup

# The default of Options.worker_start_timeout_s: spawning a worker imports torch (seconds) and,
# on GPU, makes a context.
START_TIMEOUT_S = 180.0


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
    def __init__(self, ctx: Any, serialize_gpu: bool, setup: WorkerSetup) -> None:
        self.ctx = ctx
        self.serialize_gpu = serialize_gpu
        self.setup = setup
        self.start()

    def start(self) -> None:
        self.conn, child = self.ctx.Pipe(duplex=True)
        # Started with the allow-listed environment only (runtime/isolation.py): a worker
        # runs code from outside, which must not read the user's secrets.
        self.process = IsolatedProcess(
            target=worker_main, args=(child, self.serialize_gpu, self.setup), daemon=True
        )
        with _main_module_hidden():
            self.process.start()
        child.close()
        self.ready = False
        self.started_at = time.monotonic()
        self.job: tuple[int, float] | None = None  # (ticket, deadline)

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

    With several workers the pool hands the GPU to one job at a time (`serialize_gpu`):
    workers load and compile in parallel, but validate and time alone, so timings stay
    clean. A job's timeout counts from its dispatch until it asks for the GPU, and again
    from the moment it gets it; a worker that dies holding the GPU gives it back.
    `submit`/`collect` keep jobs in flight without waiting for a batch. `setup` (default: this
    process's cache layout) goes to every worker in its start arguments; a worker that has not
    said it is ready after `start_timeout_s` fails the pool."""

    def __init__(
        self,
        workers: int = 1,
        timeout_s: float = 60,
        serialize_gpu: bool | None = None,
        setup: WorkerSetup | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        if workers < 1:
            raise ValueError(f"a pool needs at least one worker, got {workers}")
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s
        self.setup = setup or WorkerSetup(CacheLayout.of())
        self._ctx = mp.get_context("spawn")
        serialize = workers > 1 if serialize_gpu is None else serialize_gpu
        started = time.monotonic()
        self._workers = [_Worker(self._ctx, serialize, self.setup) for _ in range(workers)]
        self.replaced = 0  # workers replaced after a crash or a timeout
        self._jobs: dict[int, tuple[Job, float]] = {}  # ticket -> (job, submitted at)
        self._pending: collections.deque[int] = collections.deque()
        self._done: dict[int, EvalResult] = {}
        self._next_ticket = 0
        self._gpu_holder: _Worker | None = None
        self._gpu_waiting: collections.deque[_Worker] = collections.deque()
        self.start_s: float | None = None  # seconds until every worker was ready
        self._started = started

    @property
    def size(self) -> int:
        return len(self._workers)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for w in self._workers:
            w.stop()
        self._workers = []

    @property
    def closed(self) -> bool:
        return not self._workers

    def wait_ready(self) -> float:
        """Block until every worker has started; returns the seconds the start took."""
        while not all(w.ready for w in self._workers):
            self._wait()
            for w in self._workers:
                self._collect(w)
        if self.start_s is None:
            self.start_s = time.monotonic() - self._started
        return self.start_s

    def evaluate(self, job: Job) -> EvalResult:
        return self.evaluate_many([job])[0]

    def evaluate_many(self, jobs: Sequence[Job]) -> list[EvalResult]:
        """Results in the order of `jobs`."""
        tickets = [self.submit(job) for job in jobs]
        results: dict[int, EvalResult] = {}
        while len(results) < len(tickets):
            results.update(self.collect())
        return [results[t] for t in tickets]

    def submit(self, job: Job) -> int:
        """Queue `job`; returns the ticket that `collect` reports its result under."""
        if not self._workers:
            raise RuntimeError("the WorkerPool is closed; make a new one")
        ticket = self._next_ticket
        self._next_ticket += 1
        self._jobs[ticket] = (job, time.monotonic())
        self._pending.append(ticket)
        self._dispatch()
        return ticket

    @property
    def in_flight(self) -> int:
        return len(self._jobs)

    def collect(self, timeout: float | None = None) -> dict[int, EvalResult]:
        """Wait until at least one submitted job has finished (or `timeout` seconds passed)
        and return {ticket: result} for every finished one."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._done and self._jobs:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._wait(left)
            for w in self._workers:
                self._collect(w)
            self._dispatch()
            if deadline is not None and time.monotonic() >= deadline:
                break
        done, self._done = self._done, {}
        return done

    def _dispatch(self) -> None:
        for w in self._workers:
            if w.ready and w.job is None and self._pending:
                ticket = self._pending.popleft()
                job, submitted = self._jobs[ticket]
                w.conn.send((ticket, job))
                w.job = (ticket, time.monotonic() + self.timeout_s)
                self._jobs[ticket] = (job, time.monotonic() - submitted)  # now: seconds queued

    def _wait(self, timeout: float | None = None) -> None:
        now = time.monotonic()
        deadlines = [w.job[1] for w in self._workers if w.job and w.job[1] != float("inf")]
        deadlines += [w.started_at + self.start_timeout_s for w in self._workers if not w.ready]
        if timeout is not None:
            deadlines.append(now + timeout)
        wait = max(0.0, min(deadlines) - now) if deadlines else None
        waitables: list[Any] = [w.conn for w in self._workers]
        waitables += [w.process.sentinel for w in self._workers]
        mpc.wait(waitables, wait)

    def _grant_gpu(self) -> None:
        while self._gpu_holder is None and self._gpu_waiting:
            w = self._gpu_waiting.popleft()
            if w.job is None or not w.process.is_alive():
                continue
            self._gpu_holder = w
            w.job = (w.job[0], time.monotonic() + self.timeout_s)  # its GPU time starts now
            with contextlib.suppress(OSError):
                w.conn.send(("gpu", "granted"))

    def _release_gpu(self, w: _Worker) -> None:
        if self._gpu_holder is w:
            self._gpu_holder = None
        with contextlib.suppress(ValueError):
            self._gpu_waiting.remove(w)
        self._grant_gpu()

    def _collect(self, w: _Worker) -> None:
        now = time.monotonic()
        if not w.ready:
            if w.conn.poll():
                try:
                    w.conn.recv()  # ("ready", pid)
                    w.ready = True
                    return
                except (EOFError, OSError):
                    pass
            if not w.process.is_alive() or now > w.started_at + self.start_timeout_s:
                code = w.process.exitcode
                w.stop(kill=True)
                raise RuntimeError(
                    f"a kernelpro worker failed to start within {self.start_timeout_s:g} s "
                    f"(exit code {code}); run `python -c 'import torch, kernelpro_backend'` to "
                    "see an import error, or raise the worker_start_timeout_s option"
                )
            return
        if w.job is None:
            return
        ticket = w.job[0]
        while w.conn.poll():
            try:
                message = w.conn.recv()
            except (EOFError, OSError):
                break  # the worker died mid-reply: handled below as a crash
            if message[0] == "gpu":
                if message[1] == "acquire":
                    self._gpu_waiting.append(w)
                    w.job = (ticket, float("inf"))  # waiting for the GPU is not its time
                    self._grant_gpu()
                else:
                    self._release_gpu(w)
                continue
            _, result, fatal = message
            self._finish(w, ticket, EvalResult.from_dict(result))
            if fatal:
                self._replace(w, kill=False)
            return
        job = self._jobs[ticket][0]
        if not w.process.is_alive() or w.conn.closed:
            w.process.join(1)
            self._finish(
                w,
                ticket,
                EvalResult(
                    EvalStatus.CRASHED,
                    message=_death_message(w.process.exitcode) + "; a new worker was started",
                    details={
                        "exitcode": w.process.exitcode,
                        "subgraph": job.name,
                        "candidate": job.candidate.describe(),
                    },
                ),
            )
            self._replace(w, kill=True)
        elif w.job is not None and now >= w.job[1]:
            self._finish(
                w,
                ticket,
                EvalResult(
                    EvalStatus.TIMED_OUT,
                    message=f"no result within {self.timeout_s:g} s (a hang or an endless "
                    "loop); the worker was killed and replaced",
                    details={
                        "timeout_s": self.timeout_s,
                        "subgraph": job.name,
                        "candidate": job.candidate.describe(),
                    },
                ),
            )
            self._replace(w, kill=True)

    def _finish(self, w: _Worker, ticket: int, result: EvalResult) -> None:
        """Record `result` for `ticket`, with the seconds it waited in the queue added to its
        phases; the worker is free and gives the GPU back if it held it."""
        queued = self._jobs.pop(ticket)[1]
        phases = {"queue": round(queued, 4), **dict(result.details.get("phase_s") or {})}
        self._done[ticket] = dataclasses.replace(
            result, details={**result.details, "phase_s": phases}
        )
        w.job = None
        self._release_gpu(w)

    def _replace(self, w: _Worker, kill: bool) -> None:
        self.replaced += 1
        self._release_gpu(w)
        w.restart(kill=kill)
