"""What a worker process is started with.

Owns: `WorkerSetup`, built from the caller's options: where a worker's files go (the cache
layout: cubins, ceilings) and its compile limit. It is plain data passed in the spawn
arguments, so `options={"cache_dir": ...}` reaches the workers without anyone changing
os.environ.
Must not: start processes (pool.py) or read the environment itself (paths.py resolves the
layout in the caller).
"""

from __future__ import annotations

import dataclasses

from ..options import Options
from ..paths import CacheLayout
from .cuda.compile import NVCC_TIMEOUT_S


@dataclasses.dataclass(frozen=True)
class WorkerSetup:
    """A worker's cache layout and nvcc limit, from the caller's options."""

    layout: CacheLayout
    nvcc_timeout_s: float = NVCC_TIMEOUT_S

    def absolute(self) -> WorkerSetup:
        """The same setup with its paths absolute (a worker works in a directory of its own)."""
        layout = CacheLayout(self.layout.root.absolute(), self.layout.cubin_root.absolute())
        return dataclasses.replace(self, layout=layout)

    @classmethod
    def of(cls, options: Options) -> WorkerSetup:
        return cls(CacheLayout.of(options.cache_dir), options.nvcc_timeout_s)
