"""Search on a miss across the ranks of a torch.distributed job (torchrun, DDP).

Owns: `DistributedFinder`, the provider the backend uses when torch.distributed runs more than
one rank and search="on-miss". Before a graph's subgraphs are looked up (`prepare`, which every
rank calls for the same graph in the same order), the ranks agree on one owner per subgraph
key — the lowest rank holding a proved entry for it; the misses, longest estimated search
first, are claimed one at a time from a counter in the job's store, so a rank whose searches
end early takes more (search times vary 3x beyond any estimate: plateaus, trial counts);
without a store, a deterministic split balanced by estimated cost (`split`) — the owner
resolves it (its entry, or its search),
and the owners' results are exchanged as cache-entry bytes (the JSON that bundles carry, never
pickle), checked and admitted on arrival like an import. A received entry then takes the path of
every entry made elsewhere (`KernelFinder.proved`): the sender's proof stands only where this
rank can check it — the entry's checksum, and the toolchain (kernelpro's generator included)
and GPU model it was proved on equal to this rank's, as for an entry of its own store — else it
is re-proved on this rank's GPU before its first use; stored in every rank's cache once proved.
The ranks then drop whatever any rank refused, so every rank installs the same kernel for the
same key, or all keep the fallback; no rank searches a key another rank owns. A failed exchange (a rank died, timed out or raised) leaves
the undecided keys on the fallback, recorded as misses.
Must not: search or store by itself (KernelFinder does) or move bytes (exchange.py does).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Sequence

from ..cache.artifact import CorruptEntry, KernelArtifact, decode_entry, encode_entry
from ..cache.store import Admit, Hit, admitted
from ..fx_passes import Subgraph
from ..profilers.speed_of_light import SpeedOfLight
from ..rewrite.providers import IsolatedMs, Kernel
from .admit import admit
from .exchange import Exchange, ExchangeFailed
from .finder import KernelFinder

log = logging.getLogger("kernelpro.distributed")


def search_cost(subgraph: Subgraph) -> float:
    """A subgraph's estimated search cost: a fixed part (the budget-bound search) plus one that
    grows with the bytes its trials move, as the roofline counts them (inputs read once,
    outputs written once): compiling costs the same, timing and validating scale."""
    return 1.0 + SpeedOfLight.work(subgraph).bytes / 2**30


def split(costs: Sequence[tuple[str, float]], world: int) -> dict[str, int]:
    """Owner rank per key: longest cost first onto the least-loaded rank (ties: lower rank;
    equal costs: key order), the same on every rank for the same input."""
    load = [0.0] * world
    owners: dict[str, int] = {}
    for digest, cost in sorted(costs, key=lambda kc: (-kc[1], kc[0])):
        rank = min(range(world), key=lambda r: (load[r], r))
        owners[digest] = rank
        load[rank] += cost
    return owners


class DistributedFinder:
    """A KernelFinder whose misses are split across ranks and whose winners are shared."""

    # `prepare` is a collective: a warm-up finds the whole step's subgraphs first, so that the
    # ranks agree on them in one round (warmup/offline.py)
    agrees_across_ranks = True

    def __init__(self, inner: KernelFinder, exchange: Exchange, admit: Admit = admit) -> None:
        self.inner = inner
        self.exchange = exchange
        # Every rank, the owner too, runs the same check on the same bytes: all agree.
        self.admit = admit
        self.decided: dict[str, KernelArtifact | None] = {}  # digest -> the agreed artifact
        self._claim: Callable[[], int] | None = None  # this round's claims (exchange.claimer)

    def prestart(self) -> None:
        self.inner.prestart()

    def _digest(self, subgraph: Subgraph) -> str:
        return self.inner.cache.key_for(subgraph.key).digest

    def prepare(self, subgraphs: Sequence[Subgraph]) -> None:
        """Agree with the other ranks on the kernel of each new subgraph key (collective)."""
        self.inner.prepare(subgraphs)  # what any rank's searches will need (CUTLASS builds)
        todo: dict[str, Subgraph] = {}
        for sg in subgraphs:
            if not sg.symbolic and sg.inputs and self._digest(sg) not in self.decided:
                todo.setdefault(self._digest(sg), sg)
        if not todo:
            return
        why = "not compiled on every rank"  # a key left undecided by a finished exchange
        try:
            owners, queue = self._owners(todo)
            arrived = self._install(self._resolve_mine(todo, owners, queue), owners, set(queue))
            self.decided.update(self._agreed(arrived))
        except ExchangeFailed as e:
            log.warning("%s; %d subgraph(s) keep the fallback", e, len(todo))
            why = f"exchange failed ({e})"
        for digest, sg in todo.items():
            if digest not in self.decided:
                self.decided[digest] = None
                self.inner.record_miss(self.inner.cache.key_for(sg.key), sg, why)

    def _owners(self, todo: dict[str, Subgraph]) -> tuple[dict[str, int], list[str]]:
        """(owner per key held somewhere or statically split, keys to claim at run time)."""
        held = [d for d, sg in todo.items() if self._held(sg)]
        views = [
            json.loads(part)
            for part in self.exchange.all_gather(
                json.dumps({"keys": list(todo), "held": held}).encode()
            )
        ]
        common = set.intersection(*(set(v["keys"]) for v in views))
        if len(common) != len(todo):
            log.warning(
                "the ranks compiled different subgraphs (%d here, %d on all); the "
                "others keep the fallback on this rank",
                len(todo),
                len(common),
            )
        owners: dict[str, int] = {}
        for digest in sorted(common):
            holders = [r for r, v in enumerate(views) if digest in v["held"]]
            if holders:
                owners[digest] = holders[0]
        rest = [(d, search_cost(todo[d])) for d in sorted(common) if d not in owners]
        self._claim = self.exchange.claimer(len(rest)) if rest else None
        if self._claim is None:
            owners.update(split(rest, self.exchange.world))
            return owners, []
        return owners, [d for d, _ in sorted(rest, key=lambda dc: (-dc[1], dc[0]))]

    def _held(self, subgraph: Subgraph) -> bool:
        hit = self.inner.cache_op(
            "read", lambda: self.inner.cache.lookup(self.inner.cache.key_for(subgraph.key))
        )
        return hit is not None and hit.unproved is None

    def _resolve_mine(
        self, todo: dict[str, Subgraph], owners: dict[str, int], queue: list[str]
    ) -> bytes:
        """This rank's share, resolved (hit or search), as {digest: entry JSON or null}: the
        keys it owns, then the queue's keys it claims until none is left."""
        mine: dict[str, str | None] = {}
        for digest in [d for d in todo if owners.get(d) == self.exchange.rank]:
            mine[digest] = self._resolved(todo[digest])
        while queue and self._claim is not None and (i := self._claim()) < len(queue):
            mine[queue[i]] = self._resolved(todo[queue[i]])
        log.info(
            "rank %d resolved %d of %d subgraph(s)",
            self.exchange.rank,
            len(mine),
            len(owners) + len(queue),
        )
        return json.dumps(mine).encode()

    def _resolved(self, subgraph: Subgraph) -> str | None:
        artifact = self.inner.resolve(subgraph)
        key = self.inner.cache.key_for(subgraph.key)
        return None if artifact is None else encode_entry(key, artifact).decode()

    def _install(
        self, mine: bytes, owners: dict[str, int], claimed: set[str]
    ) -> dict[str, tuple[KernelArtifact | None, bool]]:
        """Each decided key's artifact as it arrived here, and whether its owner sent one."""
        arrived = {}
        for rank, part in enumerate(self.exchange.all_gather(mine)):
            for digest, text in json.loads(part).items():
                # Only the owner's word counts; a claimed key's owner is who claimed it (one).
                if owners.get(digest) == rank or (digest in claimed and digest not in owners):
                    owners[digest] = rank
                    arrived[digest] = (self._arrived(digest, text, rank), text is not None)
        return arrived

    def _agreed(
        self, arrived: dict[str, tuple[KernelArtifact | None, bool]]
    ) -> dict[str, KernelArtifact | None]:
        """The arrived artifacts less every key some rank refused (its check or its re-proof
        failed there): one more all-gather, of those keys."""
        refused = sorted(d for d, (artifact, sent) in arrived.items() if sent and artifact is None)
        parts = self.exchange.all_gather(json.dumps(refused).encode())
        dropped = set().union(*(json.loads(p) for p in parts)) - set(refused)
        for digest in sorted(dropped & set(arrived)):
            log.warning("%s was refused on another rank; the fallback runs on all",
                        digest[:12])  # fmt: skip
        return {d: None if d in dropped else a for d, (a, _) in arrived.items()}

    def _arrived(self, digest: str, text: str | None, rank: int) -> KernelArtifact | None:
        """The owner's artifact, checked like an import (checksum, key, admitted code); one
        from another rank is then proved here like any entry made elsewhere."""
        if text is None:
            return None
        try:
            entry = decode_entry(text.encode())
        except CorruptEntry as e:
            log.warning("rank %d sent a corrupt entry for %s: %s", rank, digest[:12], e)
            return None
        artifact, problem = admitted(self.admit, entry.artifact)
        if entry.key.digest != digest:
            artifact, problem = None, "its key is not the one agreed"
        if artifact is None:
            log.warning("refusing rank %d's entry %s: %s", rank, digest[:12], problem)
            return None
        if rank == self.exchange.rank:
            return artifact
        entry = dataclasses.replace(entry, artifact=artifact)
        hit = Hit(entry, f"rank {rank}", self.inner.cache.unproved(entry))
        if hit.unproved is not None:
            return self.inner.proved(entry.key, hit)  # re-proved here, stored if it passes
        self.inner.cache_op(
            "store a shared kernel in", lambda: self.inner.cache.put(entry.key, artifact)
        )
        return artifact

    def find(self, subgraph: Subgraph) -> Kernel | None:
        """The agreed kernel (after `prepare`); a key no exchange decided runs the fallback."""
        if subgraph.symbolic:
            return None
        digest = self._digest(subgraph)
        if digest not in self.decided:
            log.warning(
                "%s %s was not agreed with the other ranks (prepare was not called); "
                "running the fallback",
                subgraph.pattern,
                digest[:12],
            )
            return None
        return self.inner.use(subgraph, self.decided[digest])

    def find_dynamic(self, subgraph: Subgraph) -> Kernel | None:
        """The agreed kernel of a symbolic subgraph's instance (rewrite/dispatch.py). Instances at
        the compile-time sizes were agreed in `prepare`; sizes first seen at run time cannot be
        (each rank meets them alone, mid-step): they run the fallback, recorded as misses."""
        digest = self._digest(subgraph)
        if digest not in self.decided:
            key = self.inner.cache.key_for(subgraph.key)
            why = "sizes first seen at run time under torch.distributed, not agreed across ranks"
            self.inner.record_miss(key, subgraph, why)
            return None
        return self.inner.use(subgraph, self.decided[digest], behind_op=True)

    def family_known(self, family: str) -> bool:
        return self.inner.family_known(family)

    def isolated_ms(self, subgraph: Subgraph) -> IsolatedMs | None:
        """The inner finder's figures for what it serves `subgraph` (MeasuredProvider)."""
        return self.inner.isolated_ms(subgraph)
