"""Bytes between the ranks of a torch.distributed job, never pickled.

Owns: `Exchange`, an all-gather of one byte string per rank over a gloo process group of its
own (CPU tensors, whatever backend the user's group runs: NCCL's tensors would have to be on
the GPU and its collectives block the training stream), with a timeout; `Exchange.claimer`, a
shared counter in the job's store from which the ranks take work items one at a time; and
`distributed_world()`, whether this process is one rank of several.
Must not: decide what is exchanged (distributed.py does) or use `all_gather_object`, which
pickles.
"""

from __future__ import annotations

import datetime
import itertools
import threading
from collections.abc import Callable
from typing import Any

import torch


class ExchangeFailed(RuntimeError):
    """A collective failed: a rank died, timed out or raised. The caller falls back."""


def distributed_world() -> tuple[int, int] | None:
    """(rank, world size) when torch.distributed is initialised with more than one rank."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    world = dist.get_world_size()
    return (dist.get_rank(), world) if world > 1 else None


_GROUPS: dict[float, Any] = {}
_LOCK = threading.Lock()
# Claim rounds, counted per process: every rank opens them in the same order (each follows the
# same collective), so round N names the same counter on every rank.
_ROUNDS = itertools.count()


class Exchange:
    """exchange = Exchange(timeout_s=600); parts = exchange.all_gather(b"...")  # one per rank"""

    def __init__(self, timeout_s: float, group: Any = None) -> None:
        import torch.distributed as dist

        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.timeout_s = timeout_s
        if group is None:
            # Creating a group is itself collective: every rank makes the same ones, in the same
            # order, the first time an exchange with this timeout is needed.
            with _LOCK:
                if timeout_s not in _GROUPS:
                    _GROUPS[timeout_s] = dist.new_group(
                        backend="gloo", timeout=datetime.timedelta(seconds=timeout_s)
                    )
                group = _GROUPS[timeout_s]
        self.group = group
        # Every collective's Work, kept for the exchange's lifetime: see _gather.
        self._works: list[Any] = []

    def _gather(self, parts: list[torch.Tensor], mine: torch.Tensor) -> None:
        """One all_gather, waited for, its Work kept alive. gloo's worker thread drops its
        reference to a finished Work while holding the group's queue mutex; if that is the
        last reference, destroying it decrefs the tensors' Python objects and needs the GIL,
        which the main thread holds while it waits on that mutex to enqueue the next
        collective: a deadlock (seen as a rank stuck entering the second all_gather, about 1
        run in 7 of tests/tuner/test_distributed.py; gdb showed exactly these two threads).
        Holding the Work here makes the main thread's reference the last one."""
        import torch.distributed as dist

        work = dist.all_gather(parts, mine, group=self.group, async_op=True)
        self._works.append(work)
        work.wait()

    def all_gather(self, data: bytes) -> list[bytes]:
        """Every rank's `data`, in rank order. Raises ExchangeFailed."""
        try:
            size = torch.tensor([len(data)], dtype=torch.int64)
            sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world)]
            self._gather(sizes, size)
            longest = max(int(s.item()) for s in sizes)
            buf = torch.zeros(max(longest, 1), dtype=torch.uint8)
            if data:
                buf[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            parts = [torch.empty_like(buf) for _ in range(self.world)]
            self._gather(parts, buf)
        except Exception as e:  # gloo raises RuntimeError/DistBackendError on a dead rank
            raise ExchangeFailed(
                f"exchange between {self.world} ranks failed on rank {self.rank} "
                f"({type(e).__name__}: {e})"
            ) from e
        return [p[: int(n.item())].numpy().tobytes() for p, n in zip(parts, sizes, strict=True)]

    def claimer(self, items: int) -> Callable[[], int] | None:
        """`claim() -> index`: the next of `items` work items no rank has taken yet (`items`
        or more once all are taken), each index handed to exactly one rank, through an atomic
        counter in the process group's store — a rank that finishes early takes more. Every
        rank must call this for the same round (after the same collective). None when the
        default group has no store to count in (the caller splits the items statically)."""
        import torch.distributed as dist

        try:
            store = dist.distributed_c10d._get_default_store()
        except Exception:  # no default group or no store behind it: a static split then
            return None
        key = f"kernelpro/claims/{next(_ROUNDS)}"

        def claim() -> int:
            try:
                return int(store.add(key, 1)) - 1
            except Exception as e:  # the store's host (rank 0 or the agent) is gone
                raise ExchangeFailed(f"claiming work on rank {self.rank} failed ({e})") from e

        return claim
