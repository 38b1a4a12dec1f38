"""Compiling, loading, validating and timing candidate kernels, isolated in worker processes.

Must not: decide what to try (search/ does)."""

from .candidate import BaselineCandidate, Candidate, SourceCandidate, SpecCandidate
from .job import Job
from .pool import WorkerPool
from .result import EvalResult, EvalStatus
from .timing import Timing, faster
from .worker_setup import WorkerSetup

__all__ = [
    "BaselineCandidate",
    "Candidate",
    "EvalResult",
    "EvalStatus",
    "Job",
    "SourceCandidate",
    "SpecCandidate",
    "Timing",
    "WorkerPool",
    "WorkerSetup",
    "faster",
]
