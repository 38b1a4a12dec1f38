"""Compiling, loading, validating and timing candidate kernels, isolated in worker processes.

Must not: decide what to try (search/ does)."""

from .result import EvalResult, EvalStatus

__all__ = ["EvalResult", "EvalStatus"]
