"""Several processes writing one cache lose nothing; an interrupted warm-up resumes exactly."""

from __future__ import annotations

import multiprocessing

from graphs import python_artifact, trace
from workers import put_many, put_then_crash, synthetic_key

from kernelpro_backend.cache import KernelCache, pending, store_winner

WORKERS, PUTS = 4, 20


def test_concurrent_writers_lose_no_entries(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(WORKERS) as pool:
        done = pool.starmap(put_many, [(str(tmp_path), w, PUTS) for w in range(WORKERS)])
    assert done == [PUTS] * WORKERS
    with KernelCache(tmp_path) as cache:
        for w in range(WORKERS):
            for i in range(PUTS):
                artifact = cache.get(synthetic_key(w, i))
                assert artifact is not None, (w, i)
                assert artifact.launch["tag"] == w * 1000 + i
        assert sum(1 for _ in cache.entries()) == WORKERS * PUTS


def test_interrupted_warmup_resumes_with_exactly_the_rest(tmp_path):
    keys = [synthetic_key(9, i) for i in range(10)]
    ctx = multiprocessing.get_context("spawn")
    # The "warm-up" process writes the first 6 entries, then dies without closing anything.
    worker = ctx.Process(target=put_then_crash, args=(str(tmp_path), 9, 6))
    worker.start()
    worker.join(timeout=120)
    assert worker.exitcode == 3
    with KernelCache(tmp_path) as reopened:
        assert reopened.missing(keys) == keys[6:]


def test_pending_lists_unsearched_subgraphs_once(cache):
    import torch

    def two_chains(x, y):
        return torch.tanh(x) * 2.0, torch.softmax(y, -1)

    subgraphs = trace(two_chains, torch.randn(4, 8), torch.randn(4, 16))
    assert len(subgraphs) == 2
    assert pending(cache, subgraphs + subgraphs) == subgraphs
    store_winner(cache, subgraphs[0], python_artifact())
    assert pending(cache, subgraphs) == [subgraphs[1]]
    assert cache.get(cache.key_for(subgraphs[0].key)).pattern == subgraphs[0].pattern
