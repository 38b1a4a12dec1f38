"""Where the time of one evaluation goes.

Owns: `Phases`, a stopwatch that adds the seconds spent in named phases (load, compile,
gpu_wait, validate, time, feedback, ...) for the search log's per-trial `phase_s`.
Must not: decide anything from the times.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator


class Phases:
    """phases = Phases()
    with phases("validate"):
        ...
    phases.seconds  # {"validate": 0.41}
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - started)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + max(0.0, seconds)

    def rounded(self) -> dict[str, float]:
        return {k: round(v, 4) for k, v in self.seconds.items()}
