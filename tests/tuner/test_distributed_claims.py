"""The ranks of a distributed search take the misses one at a time from a shared counter, so a
rank stuck in a long search does not hold up keys the others could search: in-process ranks
(threads) over a fake exchange; the real store's counter runs in test_distributed.py."""

from __future__ import annotations

import collections
import itertools
import threading
import time

import torch
from helpers import subgraphs_of

from kernelpro_backend.cache import KernelCache, cache_key
from kernelpro_backend.options import Options
from kernelpro_backend.tuner import KernelFinder
from kernelpro_backend.tuner.distributed import DistributedFinder


class _Room:
    """What the ranks share: the all-gather's slots and the claim counters."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.barrier = threading.Barrier(world, timeout=60)
        self.parts = [b""] * world
        self.counters: collections.Counter[int] = collections.Counter()
        self.lock = threading.Lock()


class _Exchange:
    def __init__(self, room: _Room, rank: int, claims: bool) -> None:
        self.room, self.rank, self.world, self.claims = room, rank, room.world, claims
        self.rounds = itertools.count()

    def all_gather(self, data: bytes) -> list[bytes]:
        self.room.barrier.wait()
        self.room.parts[self.rank] = data
        self.room.barrier.wait()
        parts = list(self.room.parts)
        self.room.barrier.wait()
        return parts

    def claimer(self, items: int):
        if not self.claims:
            return None  # no store: the static split
        key = next(self.rounds)

        def claim() -> int:
            with self.room.lock:
                self.room.counters[key] += 1
                return self.room.counters[key] - 1

        return claim


def _subgraphs():
    """Six subgraphs with distinct keys (softmax over six row lengths)."""
    found = []
    for n in (8, 12, 16, 20, 24, 28):
        torch._dynamo.reset()  # static sizes for each (no symbolic recompile)
        found.append(
            subgraphs_of(lambda x: torch.softmax(x, -1), torch.randn(4, n), train=False)[0]
        )
    return found


def _run(tmp_path, claims: bool, slow_first_s: float) -> list[list[str]]:
    """Two ranks prepare the same subgraphs; rank 1's first search takes `slow_first_s`.
    Returns the keys each rank searched."""
    subgraphs = _subgraphs()
    room = _Room(2)
    searched: list[list[str]] = [[], []]
    finders = []
    rank1_in_a_search = threading.Event()
    for rank in range(2):

        def search(sg, rank=rank):
            if slow_first_s and rank == 1 and not searched[1]:
                rank1_in_a_search.set()  # rank 1 holds a claimed key from here on
                time.sleep(slow_first_s)
            elif slow_first_s and rank == 0:
                rank1_in_a_search.wait(30)  # however the threads are scheduled
            searched[rank].append(cache_key(sg.key).digest)
            return None  # the fallback wins: nothing to store or load

        options = Options(search="on-miss", fallback="eager", cache_dir=str(tmp_path / f"c{rank}"))
        inner = KernelFinder(KernelCache(tmp_path / f"c{rank}"), options, searcher=search)
        finders.append(
            DistributedFinder(inner, _Exchange(room, rank, claims), admit=lambda a: None)
        )
    threads = [threading.Thread(target=f.prepare, args=(subgraphs,)) for f in finders]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(sorted(f.decided) == sorted(finders[0].decided) for f in finders)
    assert len(finders[0].decided) == len(subgraphs)
    return searched


def test_a_rank_stuck_in_a_long_search_leaves_the_rest_to_the_others(tmp_path):
    searched = _run(tmp_path, claims=True, slow_first_s=3.0)
    every = searched[0] + searched[1]
    assert len(every) == len(set(every)) == 6  # each key once
    assert searched[1] and len(searched[0]) == 5  # rank 0 took all the others


def test_without_a_store_the_static_split_still_searches_each_key_once(tmp_path):
    searched = _run(tmp_path, claims=False, slow_first_s=0.0)
    every = searched[0] + searched[1]
    assert len(every) == len(set(every)) == 6
    assert len(searched[0]) == len(searched[1]) == 3  # equal estimated costs: half each
