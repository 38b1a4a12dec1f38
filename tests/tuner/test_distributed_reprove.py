"""A winner another rank sends is proved on this rank before its first use: the sender's proof
stands only where this rank can check it (the entry's checksum, the same toolchain with
kernelpro's generator, the same GPU model), else the entry goes through the finder's re-proof
path; a key any rank refuses keeps the fallback on every rank. In-process ranks (threads) over
the fake exchange of test_distributed_claims.py; fake provers record what they were asked."""

from __future__ import annotations

import dataclasses
import threading

import torch
from helpers import subgraphs_of
from test_distributed_claims import _Exchange, _Room

from kernelpro_backend.cache import KernelArtifact, KernelCache, Provenance, Toolchain, cache_key
from kernelpro_backend.cache.maintenance import Verdict
from kernelpro_backend.options import Options
from kernelpro_backend.tuner import KernelFinder
from kernelpro_backend.tuner.distributed import DistributedFinder

TOOLCHAIN = Toolchain("2.11.0", "3.5.0", "12.8")


def _subgraphs():
    found = []
    for n in (8, 12):
        torch._dynamo.reset()  # static sizes for each
        found.append(
            subgraphs_of(lambda x: torch.softmax(x, -1), torch.randn(4, n), train=False)[0]
        )
    return found


def _ranks(tmp_path, gpus: tuple[str, str], proves: tuple[bool, bool]):
    """Two ranks on `gpus`, each searching its half (the static split) and finding a kernel;
    rank r's prover passes when proves[r]. Returns (finders, the digests each prover got)."""
    subgraphs = _subgraphs()
    room = _Room(2)
    asked: list[list[str]] = [[], []]
    finders = []
    for rank in range(2):
        made = Provenance(toolchain=TOOLCHAIN, gpu=gpus[rank])

        def search(sg, rank=rank, made=made):
            return KernelArtifact(language="python", source=f"# found by rank {rank}",
                                  entry="ref", kernel_ms=0.001, baselines_ms={"eager": 1.0},
                                  provenance=made)  # fmt: skip

        def prove(entry, rank=rank, made=made):
            asked[rank].append(entry.key.digest)
            if not proves[rank]:
                return Verdict("failed", "wrong on this GPU")
            return Verdict("ok", "re-proved", updated=dataclasses.replace(
                entry.artifact, provenance=made))  # fmt: skip

        cache = KernelCache(tmp_path / f"c{rank}", toolchain=TOOLCHAIN, gpu=gpus[rank])
        options = Options(search="on-miss", fallback="eager", cache_dir=str(tmp_path / f"c{rank}"))
        inner = KernelFinder(cache, options, searcher=search, prover=prove)
        exchange = _Exchange(room, rank, claims=False)
        finders.append(DistributedFinder(inner, exchange, admit=lambda a: None))
    threads = [threading.Thread(target=f.prepare, args=(subgraphs,)) for f in finders]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    digests = sorted(cache_key(sg.key).digest for sg in subgraphs)
    assert all(sorted(f.decided) == digests for f in finders)
    return finders, asked


def _sources(finder) -> dict[str, str | None]:
    return {d: None if a is None else a.source for d, a in finder.decided.items()}


def _owned(finder, rank: int) -> list[str]:
    return [d for d, src in _sources(finder).items() if src == f"# found by rank {rank}"]


def test_a_kernel_from_a_rank_on_another_gpu_model_is_reproved_here_first(tmp_path):
    finders, asked = _ranks(tmp_path, ("NVIDIA H100 80GB HBM3", "NVIDIA H200"), (True, True))
    assert _sources(finders[0]) == _sources(finders[1])  # both kernels, on both ranks
    mine = [_owned(finders[0], r) for r in range(2)]
    assert all(len(m) == 1 for m in mine)
    assert asked == [mine[1], mine[0]]  # each rank re-proved the other's kernel, not its own
    with KernelCache(tmp_path / "c1", toolchain=TOOLCHAIN, gpu="NVIDIA H200") as cache:
        stored = {e.key.digest: e for e in cache.entries()}
    assert cache.unproved(stored[mine[0][0]]) is None  # stored as proved on rank 1's GPU


def test_a_kernel_one_rank_cannot_reprove_keeps_the_fallback_on_every_rank(tmp_path):
    finders, asked = _ranks(tmp_path, ("NVIDIA H100 80GB HBM3", "NVIDIA H200"), (True, False))
    assert asked[1] and _sources(finders[0]) == _sources(finders[1])
    refused = asked[1][0]  # rank 0's kernel, wrong on rank 1's GPU
    assert _sources(finders[0])[refused] is None  # rank 0 dropped its own kernel too
    others = [d for d in _sources(finders[0]) if d != refused]
    assert [_sources(finders[0])[d] for d in others] == ["# found by rank 1"]
    with KernelCache(tmp_path / "c1", toolchain=TOOLCHAIN, gpu="NVIDIA H200") as cache:
        assert refused not in {e.key.digest for e in cache.entries()}


def test_a_proof_on_the_same_toolchain_and_gpu_model_is_taken_as_sent(tmp_path):
    gpu = "NVIDIA H100 80GB HBM3"
    finders, asked = _ranks(tmp_path, (gpu, gpu), (False, False))
    assert asked == [[], []]  # no re-proof: the sender's proof is one this rank can check
    assert _sources(finders[0]) == _sources(finders[1])
    assert all(src is not None for src in _sources(finders[0]).values())
