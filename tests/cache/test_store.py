"""The store: put/get, integrity checks on read, no unpickling, extra bundle directories."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging

import diskcache
import pytest
from graphs import python_artifact, with_arch

from kernelpro_backend.cache import (
    CorruptEntry,
    KernelCache,
    Toolchain,
    cache_key,
    decode_entry,
    encode_entry,
    export_bundle,
    resolve_cache_dir,
)


def test_put_get_round_trip_keeps_every_field(cache, tanh_sg):
    key = cache.key_for(tanh_sg.key)
    cubin = bytes(range(256)) * 200  # 51 KB: over diskcache's file threshold, stored as a file
    artifact = python_artifact(binary=cubin)
    assert cache.get(key) is None
    cache.put(key, artifact)
    assert cache.get(key) == artifact
    assert cache.get(key).binary == cubin
    other = cache.key_for(dataclasses.replace(tanh_sg.key, precision="tf32"))
    assert cache.get(other) is None


def test_reopened_cache_sees_entries(tmp_path, tanh_sg):
    with KernelCache(tmp_path) as first:
        key = first.key_for(tanh_sg.key)
        artifact = python_artifact(3)
        first.put(key, artifact)
    with KernelCache(tmp_path) as again:
        assert again.get(key) == artifact


def test_cache_dir_precedence(tmp_path):
    env = {"KERNELPRO_CACHE_DIR": str(tmp_path / "env")}
    assert resolve_cache_dir(tmp_path / "opt", env) == tmp_path / "opt"
    assert resolve_cache_dir(None, env) == tmp_path / "env"
    assert resolve_cache_dir(None, {}).parts[-2:] == (".cache", "kernelpro")


def test_an_entry_is_proved_here_only_if_searched_or_reproved_on_this_toolchain_and_gpu(
    tmp_path, tanh_sg
):
    old = Toolchain("2.0.0", "2.0.0", "11.8")
    with KernelCache(tmp_path, gpu="NVIDIA H100 80GB HBM3") as cache:
        key = cache.key_for(tanh_sg.key)
        here = python_artifact()
        here = dataclasses.replace(
            here, provenance=dataclasses.replace(here.provenance, gpu=cache.gpu)
        )
        cases = {
            None: here,
            "proved with torch 2.0.0": python_artifact(toolchain=old),
            # Stored by another kernelpro: its launcher may build the stored source differently.
            "kernelpro 0.0.9+0123456789ab": python_artifact(
                toolchain=dataclasses.replace(cache.toolchain, generator="0.0.9+0123456789ab")
            ),
            "timed on NVIDIA H200": dataclasses.replace(
                here, provenance=dataclasses.replace(here.provenance, gpu="NVIDIA H200")
            ),
            "imported": dataclasses.replace(
                here, provenance=dataclasses.replace(here.provenance, origin="import")
            ),
        }
        for why, artifact in cases.items():
            cache.put(key, artifact)
            hit = cache.lookup(key)
            assert hit is not None and hit.artifact == artifact
            assert (hit.unproved is None) if why is None else (why in (hit.unproved or ""))


def _tamper(data: bytes, **changes) -> bytes:
    doc = json.loads(data)
    doc["artifact"].update(changes)
    return json.dumps(doc).encode()


def _reseal(doc: dict) -> bytes:
    """Re-compute the checksum, as a careless tool rewriting an entry would."""
    doc.pop("sha256")
    body = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    doc["sha256"] = hashlib.sha256(body.encode()).hexdigest()
    return json.dumps(doc).encode()


def test_corrupt_entries_are_skipped_with_a_log_line(cache, tanh_sg, caplog):
    key = cache.key_for(tanh_sg.key)
    good = encode_entry(key, python_artifact())
    wrong_schema = json.loads(good)
    wrong_schema["schema"] = 999
    cases = {
        "bad checksum": _tamper(good, kernel_ms=0.0001),
        "unparsable": good[: len(good) // 2],
        "wrong schema": _reseal(wrong_schema),
    }
    for reason, data in cases.items():
        cache.put_raw(key.digest, data)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="kernelpro.cache"):
            assert cache.get(key) is None, reason
        assert reason in caplog.text
        assert key.short() in caplog.text
    cache.put_raw(key.digest, good)
    assert cache.get(key) == python_artifact()


def test_foreign_entry_under_our_digest_is_skipped(cache, tanh_sg, caplog):
    key = cache.key_for(tanh_sg.key)
    foreign_arch = with_arch(key, "sm_80")
    cache.put_raw(key.digest, encode_entry(foreign_arch, python_artifact()))
    with caplog.at_level(logging.WARNING, logger="kernelpro.cache"):
        assert cache.get(key) is None
    assert "foreign" in caplog.text and "sm_80" in caplog.text


def test_an_unknown_origin_makes_the_entry_corrupt(tanh_sg):
    data = json.loads(encode_entry(cache_key(tanh_sg.key), python_artifact()))
    data["artifact"]["provenance"]["origin"] = "trusted-by-me"
    with pytest.raises(CorruptEntry, match="origin"):
        decode_entry(_reseal(data))


def test_an_energy_entry_keeps_its_rule_and_joules_and_a_time_entry_its_bytes(cache, tanh_sg):
    """The rule that chose an entry and its joules go through the store; an entry without them
    encodes as before (no new keys: its checksum is unchanged), an unknown rule is corrupt."""
    key = cache.key_for(tanh_sg.key)
    energy = dataclasses.replace(
        python_artifact(), objective="energy", kernel_j=0.115, baselines_j={"inductor": 0.151}
    )
    cache.put(key, energy)
    got = cache.get(key)
    assert got == energy and got.objective == "energy"
    assert (got.kernel_j, got.baselines_j) == (0.115, {"inductor": 0.151})
    plain = json.loads(encode_entry(key, python_artifact()))["artifact"]
    assert not {"objective", "kernel_j", "baselines_j"} & set(plain)
    data = json.loads(encode_entry(key, energy))
    data["artifact"]["objective"] = "power"
    with pytest.raises(CorruptEntry, match="objective"):
        decode_entry(_reseal(data))


def test_pickled_rows_are_never_unpickled(cache, tanh_sg, monkeypatch, caplog):
    key = cache.key_for(tanh_sg.key)
    # Someone writes a pickled value into our store with plain diskcache.
    with diskcache.Cache(str(cache.directory / "kernels")) as plain:
        plain.set(key.digest, {"not": "bytes"})

    def no_unpickling(*args, **kwargs):
        raise AssertionError("pickle.load called on cache data")

    monkeypatch.setattr(diskcache.core.pickle, "load", no_unpickling)
    monkeypatch.setattr(diskcache.core.pickle, "loads", no_unpickling)
    with caplog.at_level(logging.WARNING, logger="kernelpro.cache"):
        assert cache.get(key) is None
        # scan reports the row as corrupt (so ls counts it and prune drops it), unread
        (row,) = cache.scan()
        assert (row.digest, row.entry) == (key.digest, None)
        assert "refusing to unpickle" in row.problem
    assert "refusing to unpickle" in caplog.text


def test_store_refuses_non_bytes_values(cache):
    with pytest.raises(TypeError, match="values are bytes"):
        cache._store.set("k", {"a": 1})


def test_extra_dirs_serve_bundled_entries_read_only(tmp_path, tanh_sg):
    with KernelCache(tmp_path / "source") as source:
        key = source.key_for(tanh_sg.key)
        source.put(key, python_artifact(7))
        shipped = tmp_path / "shipped"
        export_bundle(source, shipped / "model.tar.gz")
    with KernelCache(tmp_path / "user", extra_dirs=[shipped]) as user:
        assert user.get(key).launch["tag"] == 7
        assert list(user.scan()) == []  # served from the bundle, not copied into the store


def test_entry_for_another_subgraph_structure_is_corrupt(tanh_sg, linear_sg):
    from kernelpro_backend.cache import describe

    key = cache_key(tanh_sg.key)
    assert decode_entry(encode_entry(key, describe(python_artifact(), tanh_sg))).key == key
    wrong_text = describe(python_artifact(), linear_sg)
    with pytest.raises(CorruptEntry, match="does not hash to the key's structure"):
        decode_entry(encode_entry(key, wrong_text))


def test_unwritable_cache_dir_says_what_to_do(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    from kernelpro_backend.cache import CacheUnavailable

    with pytest.raises(CacheUnavailable, match="KERNELPRO_CACHE_DIR"):
        KernelCache(blocker / "cache")
