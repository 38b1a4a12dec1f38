"""Re-proving a cache entry made elsewhere before its first use here.

Owns: `Reprover(options)`, the finder's prover: for an entry imported, read from a bundle
directory, or made under another toolchain or GPU model, it runs `CacheEntryValidator` with
re-timing on the process's shared worker pool (the search's, so no second set of CUDA contexts):
the entry's stored bytes are compiled and loaded in an isolated worker, proved against the
PyTorch reference rebuilt from the entry's subgraph text on fresh inputs, and timed beside the
eager and Inductor baselines on this GPU.
Must not: decide whether the entry is used (finder.py does) or store anything.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..cache.artifact import Entry
from ..cache.maintenance import Verdict
from ..options import Options
from ..paths import CacheLayout
from ..runtime.job import Job
from ..runtime.result import EvalResult
from ..runtime.shared_pool import lease_pool
from ..runtime.worker_setup import WorkerSetup
from .verify import CacheEntryValidator

REPROVE_WORKERS = 2


class Reprover:
    """Callable on an `Entry`, returning the `Verdict` of a re-timed validation here."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.setup = WorkerSetup(CacheLayout.of(options.cache_dir), options.nvcc_timeout_s)
        self._validator: CacheEntryValidator | None = None  # made on the first foreign entry

    @property
    def workers(self) -> int:
        """The search's pool size under "on-miss" (one pool serves both); else at most
        REPROVE_WORKERS: a re-proof is one job and its two baselines, and every idle worker
        holds a CUDA context."""
        if self.options.search == "on-miss":
            return self.options.workers
        return min(REPROVE_WORKERS, self.options.workers)

    def _evaluate(self, jobs: Sequence[Job]) -> list[EvalResult]:
        with lease_pool(
            self.workers,
            self.options.job_timeout_s,
            self.options.pool_idle_s,
            setup=self.setup,
            start_timeout_s=self.options.worker_start_timeout_s,
        ) as pool:
            return pool.evaluate_many(jobs)  # type: ignore[no-any-return]

    def __call__(self, entry: Entry) -> Verdict:
        if self._validator is None:
            self._validator = CacheEntryValidator(
                evaluate=self._evaluate,
                retime=True,
                cache_dir=self.options.cache_dir,
                check_timing_s=self.options.check_timing_s,
                measure_ceilings=True,
            )
        return self._validator(entry)
