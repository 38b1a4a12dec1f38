"""KernelFinder (the one per-subgraph policy): the search policies, loading hits, storing search winners, recording misses."""

from __future__ import annotations

import logging
from dataclasses import replace as dataclasses_replace

import torch
from graphs import python_artifact, python_loader

from kernelpro_backend.cache.entries import describe
from kernelpro_backend.options import Options
from kernelpro_backend.tuner import KernelFinder


def _reference_check(kernel, subgraph):
    inputs = subgraph.make_inputs(seed=3)
    expected = subgraph.module()(*inputs)
    got = kernel(*inputs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e)  # float32 defaults: rtol 1.3e-6, atol 1e-5


def test_hit_is_loaded_and_computes_the_subgraph(cache, tanh_sg):
    cache.put(cache.key_for(tanh_sg.key), python_artifact())
    loads = []

    def loader(artifact):
        loads.append(artifact)
        return python_loader(artifact)

    provider = KernelFinder(cache, Options(), loader)
    kernel = provider.find(tanh_sg)
    assert kernel is not None
    _reference_check(kernel, tanh_sg)
    assert provider.find(tanh_sg) is kernel  # loaded once per provider
    assert len(loads) == 1
    assert not cache.misses.path.exists()


def test_cache_only_miss_runs_fallback_and_is_recorded(cache, tanh_sg):
    searched = []
    provider = KernelFinder(cache, Options(), python_loader, searcher=searched.append)
    assert provider.find(tanh_sg) is None
    assert provider.find(tanh_sg) is None
    assert searched == []  # cache-only never searches
    assert [e["digest"] for e in cache.misses.entries()] == [cache.key_for(tanh_sg.key).digest]


def test_on_miss_searches_stores_the_winner_and_reuses_it(cache, tanh_sg):
    calls = []

    def searcher(subgraph):
        calls.append(subgraph)
        return python_artifact(5)

    provider = KernelFinder(cache, Options(search="on-miss"), python_loader, searcher)
    kernel = provider.find(tanh_sg)
    assert calls == [tanh_sg]
    _reference_check(kernel, tanh_sg)
    stored = cache.get(cache.key_for(tanh_sg.key))
    assert stored.launch["tag"] == 5
    assert stored.pattern == tanh_sg.pattern and stored.ops == tuple(tanh_sg.ops)
    assert stored.subgraph_text == tanh_sg.text

    def must_not_search(subgraph):
        raise AssertionError("searched on a hit")

    later = KernelFinder(cache, Options(search="on-miss"), python_loader, must_not_search)
    _reference_check(later.find(tanh_sg), tanh_sg)
    assert not cache.misses.path.exists()


def test_on_miss_without_a_winner_records_the_miss(cache, tanh_sg, caplog):
    provider = KernelFinder(cache, Options(search="on-miss"), python_loader, lambda sg: None)
    assert provider.find(tanh_sg) is None
    assert len(cache.misses.entries()) == 1
    assert cache.get(cache.key_for(tanh_sg.key)) is None

    def crashing(subgraph):
        raise RuntimeError("worker died")

    with caplog.at_level(logging.ERROR, logger="kernelpro.cache"):
        crashed = KernelFinder(cache, Options(search="on-miss"), python_loader, crashing)
        assert crashed.find(tanh_sg) is None
    assert "worker died" in caplog.text


def test_a_subgraph_searched_without_a_winner_is_not_searched_again(cache, tanh_sg):
    calls = []

    def fallback_wins(subgraph):
        calls.append(subgraph.key)
        return None

    provider = KernelFinder(cache, Options(search="on-miss"), python_loader, fallback_wins)
    assert provider.find(tanh_sg) is None
    assert provider.find(tanh_sg) is None  # a recompile, or the same subgraph elsewhere
    assert len(calls) == 1
    fresh = KernelFinder(cache, Options(search="on-miss"), python_loader, fallback_wins)
    assert fresh.find(tanh_sg) is None and len(calls) == 2  # another process searches anew


def test_off_touches_nothing(cache, tanh_sg):
    cache.put(cache.key_for(tanh_sg.key), python_artifact())

    def loader(artifact):
        raise AssertionError("loaded with search='off'")

    assert KernelFinder(cache, Options(search="off"), loader).find(tanh_sg) is None
    assert not cache.misses.path.exists()


def test_unloadable_hit_falls_back_with_a_log_line(cache, tanh_sg, caplog):
    cache.put(cache.key_for(tanh_sg.key), python_artifact())

    def loader(artifact):
        raise OSError("CUDA_ERROR_INVALID_IMAGE")

    with caplog.at_level(logging.WARNING, logger="kernelpro.cache"):
        assert KernelFinder(cache, Options(), loader).find(tanh_sg) is None
    assert "CUDA_ERROR_INVALID_IMAGE" in caplog.text


def test_from_options_uses_cache_dir_and_extra_dirs(tmp_path, tanh_sg):
    options = Options(cache_dir=str(tmp_path / "a"), extra_cache_dirs=(str(tmp_path / "b"),))
    provider = KernelFinder.from_options(options, python_loader)
    try:
        assert provider.cache.directory == tmp_path / "a"
        assert provider.cache.extra_dirs == (tmp_path / "b",)
        assert provider.find(tanh_sg) is None
        assert (tmp_path / "a" / "misses.jsonl").exists()
    finally:
        provider.cache.close()


def test_a_search_skipped_for_memory_is_recorded_with_why(cache, tanh_sg):
    """The searcher's memory plan refused the subgraph: the manifest says what it needed."""

    class TooBig:
        skipped = None

        def __call__(self, subgraph):
            self.skipped = "needs 80.7 GiB to prove a candidate, 67.0 GiB free; kept the fallback"
            return None

    provider = KernelFinder(cache, Options(search="on-miss"), python_loader, TooBig())
    assert provider.find(tanh_sg) is None
    (entry,) = cache.misses.entries()
    assert entry["reason"].startswith("needs 80.7 GiB to prove a candidate, 67.0 GiB free")


def _spec(template, warps):
    import json

    return json.dumps({"template": template, "knobs": [["num_warps", warps]]})


def _store_family_winners(cache, warps_by_rows, family="fam"):
    """A rowwise winner with `warps` for each (rows, 32) instance of `family`, stored."""
    import dataclasses

    from graphs import tanh_subgraph

    for rows, warps in warps_by_rows:
        sg = dataclasses.replace(tanh_subgraph((rows, 32)), family=family)
        art = dataclasses.replace(python_artifact(), spec_json=_spec("rowwise", warps))
        cache.put(cache.key_for(sg.key), describe(art, sg))


def test_a_search_at_a_new_size_starts_from_its_familys_winners(cache):
    import dataclasses

    from graphs import tanh_subgraph

    _store_family_winners(cache, ((64, 8), (4, 2)))
    other = tanh_subgraph((16, 32))  # another family's entry: never a hint
    cache.put(
        cache.key_for(other.key), dataclasses.replace(python_artifact(), spec_json=_spec("x", 1))
    )
    seen = []

    def searcher(subgraph):
        seen.append(subgraph.hints)
        return None

    finder = KernelFinder(cache, Options(search="on-miss"), python_loader, searcher)
    new = dataclasses.replace(tanh_subgraph((8, 32)), family="fam")
    assert finder.find(new) is None
    # Nearest size first: 4 rows (a factor 2 away) before 64 (a factor 8).
    assert seen == [(("rowwise", (("num_warps", 2),)), ("rowwise", (("num_warps", 8),)))]
    stored = [e.artifact.family for e in cache.entries()]
    assert stored.count("fam") == 2


def test_a_family_survives_the_entry_encoding_and_older_entries_keep_their_checksum():
    from kernelpro_backend.cache.artifact import KernelArtifact

    plain = python_artifact()
    assert "family" not in plain.to_dict()
    with_family = dataclasses_replace(plain, family="abc", accuracy={"max_abs_error": 1e-6})
    again = KernelArtifact.from_dict(with_family.to_dict())
    assert again.family == "abc" and again.accuracy == {"max_abs_error": 1e-6}
    assert "accuracy" not in plain.to_dict()
    assert KernelArtifact.from_dict(plain.to_dict()).checksum == plain.checksum


def test_transfer_proves_a_winner_of_the_same_size_bucket_under_cache_only(cache):
    import dataclasses

    from graphs import tanh_subgraph

    _store_family_winners(cache, ((12, 2), (32, 8)))  # bucket (8, 16] and (16, 32]
    asked = []

    def searcher(subgraph):
        asked.append((subgraph.hints, subgraph.hints_only))
        # proved here and faster than the fallback by more than the op path costs
        won = dataclasses.replace(python_artifact(), spec_json=_spec("rowwise", 2))
        return dataclasses.replace(won, baselines_ms={"eager": 1.0, "inductor": 1.0})

    options = Options(search="cache-only", dynamic_shapes="transfer")
    finder = KernelFinder(cache, options, python_loader, searcher)
    at_14 = dataclasses.replace(tanh_subgraph((14, 32)), family="fam")
    kernel = finder.find_dynamic(at_14)
    # Only the 12-row winner shares 14's bucket; it alone is proved, and stored for 14 rows.
    assert asked == [((("rowwise", (("num_warps", 2),)),), True)]
    assert kernel is not None
    assert cache.get(cache.key_for(at_14.key)).family == "fam"
    # Nothing of 64 rows' bucket: no proof, the fallback (a miss, recorded).
    at_64 = dataclasses.replace(tanh_subgraph((64, 32)), family="fam")
    assert finder.find_dynamic(at_64) is None and len(asked) == 1
    # Under plain "dispatch", cache-only never proves anything.
    plain = KernelFinder(cache, Options(search="cache-only"), python_loader, searcher)
    assert plain.find_dynamic(dataclasses.replace(tanh_subgraph((13, 32)), family="fam")) is None
    assert len(asked) == 1


def test_compile_sizes_search_only_listed_sizes_and_prove_bucket_winners_elsewhere(cache):
    import dataclasses

    from graphs import tanh_subgraph

    _store_family_winners(cache, ((12, 2),))
    asked = []

    def searcher(subgraph):
        asked.append((subgraph.dynamic_sizes, subgraph.hints_only))
        won = dataclasses.replace(python_artifact(), spec_json=_spec("rowwise", 4))
        return dataclasses.replace(won, baselines_ms={"eager": 1.0, "inductor": 1.0})

    finder = KernelFinder(cache, Options(search="on-miss", compile_sizes=(64,)), python_loader, searcher)  # fmt: skip

    def at(rows):
        return dataclasses.replace(tanh_subgraph((rows, 32)), family="fam", dynamic_sizes=(rows,))

    # 64 is listed: a full search (not only the hints).
    assert finder.find_dynamic(at(64)) is not None
    assert asked == [((64,), False)]
    # 14 is not: the 12-row winner of its bucket, proved at 14 rows alone; no search.
    assert finder.find_dynamic(at(14)) is not None
    assert asked[1] == ((14,), True)
    # 200 is not listed and its bucket has no winner: the fallback, recorded with why.
    assert finder.find_dynamic(at(200)) is None and len(asked) == 2
    (miss,) = [e for e in cache.misses.entries() if "compile_sizes" in (e.get("reason") or "")]
    assert miss["reason"] == "dynamic sizes 200 not in compile_sizes: not searched"


def test_a_kernel_that_lost_inside_its_model_runs_the_fallback_and_is_not_searched(
    cache, tanh_sg, caplog
):
    """cache/context.py: the warm-up's in-context check recorded this hit as slower inside its
    model; every later finder (this process or another) runs the fallback, searches nothing."""
    key = cache.key_for(tanh_sg.key)
    cache.put(key, python_artifact())
    cache.context.reject(key.digest, pattern="pointwise", why="12.0 ms with it, 11.0 without")

    def must_not_search(subgraph):
        raise AssertionError("searched a kernel rejected in context")

    with caplog.at_level(logging.INFO, logger="kernelpro.cache"):
        finder = KernelFinder(cache, Options(search="on-miss"), python_loader, must_not_search)
        assert finder.find(tanh_sg) is None
        assert finder.find(tanh_sg) is None
    assert sum("lost inside its model" in r.message for r in caplog.records) == 1
    later = KernelFinder(type(cache)(cache.directory), Options(), python_loader)
    assert later.find(tanh_sg) is None  # read back from context.json


def test_a_kernel_a_warmup_holds_runs_the_fallback_until_its_check_settles_it(
    cache, tanh_sg, caplog
):
    """cache/context.py: a warm-up cut short before its in-context check leaves the kernels it
    found held; a later finder runs the fallback for them (said once) while the warm-up's own
    finders serve them, and once the check settles them every finder uses them."""
    key = cache.key_for(tanh_sg.key)
    cache.put(key, python_artifact())
    cache.context.hold(key.digest, pattern="pointwise", model="Net")
    with caplog.at_level(logging.WARNING, logger="kernelpro.cache"):
        later = KernelFinder(type(cache)(cache.directory), Options(), python_loader)
        assert later.find(tanh_sg) is None and later.find(tanh_sg) is None
    assert sum("in-context check has not run" in r.message for r in caplog.records) == 1
    warming = KernelFinder(type(cache)(cache.directory), Options(), python_loader)
    warming.serve_held = True
    assert warming.find(tanh_sg) is not None
    cache.context.settle([key.digest])
    settled = KernelFinder(type(cache)(cache.directory), Options(), python_loader)
    assert settled.find(tanh_sg) is not None


def test_holding_never_revives_a_kernel_that_lost_in_context(cache, tanh_sg):
    key = cache.key_for(tanh_sg.key)
    cache.put(key, python_artifact())
    cache.context.reject(key.digest, pattern="pointwise", why="slower")
    cache.context.hold(key.digest, pattern="pointwise", model="Net")
    cache.context.settle([key.digest])
    assert cache.context.rejected(key.digest) is not None
    finder = KernelFinder(type(cache)(cache.directory), Options(), python_loader)
    finder.serve_held = True
    assert finder.find(tanh_sg) is None


def test_a_warmup_holds_what_it_finds_and_stops_searching_past_its_share(cache, tanh_sg):
    """warmup._Recording: each kernel served is held once (cache/context.py); past
    `search_until` the finder's misses are no longer searched."""
    import time

    from graphs import tanh_subgraph

    from kernelpro_backend.warmup.offline import _Recording

    searched = []

    def search(subgraph):
        searched.append(subgraph)
        return python_artifact()

    finder = KernelFinder(cache, Options(search="on-miss"), python_loader, search)
    recording = _Recording(finder, [])
    recording.held, recording.model = set(), "Net"
    finder.serve_held = True  # as warmup() sets it
    assert recording.find(tanh_sg) is not None and recording.find(tanh_sg) is not None
    digest = cache.key_for(tanh_sg.key).digest
    assert recording.held == {digest} and cache.context.held(digest)["model"] == "Net"
    recording.search_until = time.perf_counter() - 1  # the search's share is spent
    assert recording.find(tanh_subgraph((7, 32))) is None
    assert len(searched) == 1 and not finder.searching


def test_a_warmup_does_not_hold_what_the_cache_had_before_it(cache, tanh_sg):
    """A kernel another warm-up's check already passed keeps its standing: this warm-up's
    check judges it too, but a cut-short run must not take it from the other model."""
    from kernelpro_backend.warmup.offline import _Recording

    key = cache.key_for(tanh_sg.key)
    cache.put(key, python_artifact())
    finder = KernelFinder(cache, Options(), python_loader)
    finder.serve_held = True
    recording = _Recording(finder, [])
    recording.held, recording.model = set(), "Net"
    assert recording.find(tanh_sg) is not None
    assert recording.held == set() and cache.context.held(key.digest) is None
