"""The miss manifest: one line per distinct key, with what warm-up needs to search it."""

from __future__ import annotations

from kernelpro_backend.cache import CacheKey, MissManifest


def test_misses_are_recorded_once_with_their_description(cache, tanh_sg, linear_sg):
    tanh_key = cache.key_for(tanh_sg.key)
    assert cache.misses.record(tanh_key, tanh_sg)
    assert not cache.misses.record(tanh_key, tanh_sg)
    # Another process (a fresh manifest object on the same file) does not add it again.
    assert not MissManifest(cache.misses.path).record(tanh_key, tanh_sg)
    assert MissManifest(cache.misses.path).record(cache.key_for(linear_sg.key), linear_sg)

    lines = cache.misses.path.read_text().splitlines()
    assert len(lines) == 2
    first, second = cache.misses.entries()
    assert first["pattern"] == tanh_sg.pattern and first["kind"] == tanh_sg.kind
    assert first["ops"] == tanh_sg.ops
    assert first["graph"] == "inference"
    assert first["inputs"] == [[list(s), list(st), dt] for s, st, dt in tanh_sg.input_meta]
    assert first["time"]
    assert CacheKey.from_dict(first["key"]) == tanh_key
    assert second["pattern"] == linear_sg.pattern
    assert cache.misses.keys() == [tanh_key, cache.key_for(linear_sg.key)]


def test_unreadable_manifest_lines_are_skipped(cache, tanh_sg):
    cache.misses.path.parent.mkdir(parents=True, exist_ok=True)
    cache.misses.path.write_text("{torn line\n")
    assert cache.misses.record(cache.key_for(tanh_sg.key), tanh_sg)
    assert [e["pattern"] for e in cache.misses.entries()] == [tanh_sg.pattern]
