"""Functions run in spawned worker processes by the concurrency and resume tests."""

from __future__ import annotations

import hashlib

from graphs import python_artifact

from kernelpro_backend.cache import KernelCache, cache_key
from kernelpro_backend.fx_passes import SubgraphKey


def synthetic_key(worker: int, index: int):
    """A distinct cache key without tracing a graph (workers stay light)."""
    structure = hashlib.sha256(f"worker {worker} subgraph {index}".encode()).hexdigest()
    return cache_key(SubgraphKey(structure, (((4, 4), (4, 1), "float32"),), "sm_90", "ieee"))


def put_many(directory: str, worker: int, count: int) -> int:
    with KernelCache(directory) as cache:
        for i in range(count):
            cache.put(synthetic_key(worker, i), python_artifact(worker * 1000 + i))
    return count


def put_then_crash(directory: str, worker: int, count: int) -> None:
    """Write `count` entries, then die abruptly (no close, no cleanup), like a killed warm-up."""
    import os

    cache = KernelCache(directory)
    for i in range(count):
        cache.put(synthetic_key(worker, i), python_artifact(i))
    os._exit(3)
