"""A bad cache never breaks a compile, and cleaning one never reaches outside it: prune refuses
nonsense ages and has a dry run, a row naming a file outside the cache is neither read nor
deleted, pickled keys and unreadable databases are reported and set aside, a read-only cache is
read, and hostile bundles (zip bombs, deep manifests, duplicates) are refused with a reason."""

from __future__ import annotations

import io
import json
import logging
import os
import sqlite3
import tarfile
import zipfile

import diskcache
import pytest
import torch
from graphs import python_artifact, python_loader
from helpers import run_cache_cli

from kernelpro_backend.cache import KernelCache, export_bundle, prune, read_bundle
from kernelpro_backend.cache import limits as limits_module
from kernelpro_backend.cache import store as store_module
from kernelpro_backend.cache.bundle import BundleError
from kernelpro_backend.cache.rows import CacheUnavailable
from kernelpro_backend.options import Options
from kernelpro_backend.rewrite.providers import NullProvider
from kernelpro_backend.tuner import provider as provider_module
from kernelpro_backend.tuner.finder import KernelFinder


def _db(cache: KernelCache):
    return sqlite3.connect(cache.directory / "kernels" / "cache.db")


# -- prune -----------------------------------------------------------------------------------
@pytest.mark.parametrize("days", [-1.0, 0.0, float("nan"), float("inf")])
def test_prune_refuses_ages_that_would_drop_everything(cache, tanh_sg, days):
    key = cache.key_for(tanh_sg.key)
    cache.put(key, python_artifact())
    with pytest.raises(ValueError, match="above 0"):
        prune(cache, days)
    code, text = run_cache_cli("--cache-dir", str(cache.directory), "prune", "--older-than",
                               str(days))  # fmt: skip
    assert code == 2 and "prune refused" in text
    assert cache.get(key) is not None


def test_prune_dry_run_says_what_it_would_drop_and_drops_nothing(cache):
    cache.put_raw("f" * 64, b"garbage")
    code, text = run_cache_cli("--cache-dir", str(cache.directory), "prune", "--dry-run")
    assert code == 0 and "would drop 1" in text and "corrupt" in text
    assert cache.raw("f" * 64) == b"garbage"
    assert "dropped 1" in run_cache_cli("--cache-dir", str(cache.directory), "prune")[1]
    assert cache.raw("f" * 64) is None


@pytest.mark.parametrize("where", ["absolute", "dotdot"])
def test_a_row_naming_a_file_outside_the_cache_is_neither_read_nor_deleted(
    tmp_path, cache, tanh_sg, where, caplog
):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    key = cache.key_for(tanh_sg.key)
    cache.put(key, python_artifact())
    name = (
        str(victim) if where == "absolute" else os.path.relpath(victim, cache.directory / "kernels")
    )
    with _db(cache) as db:
        db.execute("UPDATE Cache SET mode = 2, filename = ?, value = NULL WHERE key = ?",
                   (name, key.digest))  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="kernelpro.cache"):
        assert cache.get(key) is None
        report = prune(cache)
    assert [d.reason for d in report.dropped] == [f"corrupt: a cache row names a file outside "
                                                  f"the cache: {name!r}"]  # fmt: skip
    assert victim.read_text() == "precious"
    assert "outside" in caplog.text


def test_a_pickled_key_is_listed_as_corrupt_and_pruned_without_unpickling(cache, tanh_sg):
    cache.put(cache.key_for(tanh_sg.key), python_artifact())
    with diskcache.Cache(str(cache.directory / "kernels")) as plain:
        plain.set(("a", "tuple", "key"), b"x")  # diskcache pickles a tuple key
    code, text = run_cache_cli("--cache-dir", str(cache.directory), "ls")
    assert code == 0 and "1 corrupt entries" in text
    report = prune(cache)
    assert report.kept == 1 and [d.reason for d in report.dropped] == [
        "corrupt: its key is pickled or not a str digest"
    ]
    assert [item.problem for item in cache.scan()] == [None]


# -- databases that are not databases --------------------------------------------------------
@pytest.mark.parametrize("content", [b"", b"this is not sqlite at all, just some bytes"])
def test_a_database_that_is_not_sqlite_is_reported_and_set_aside(tmp_path, content, caplog):
    kernels = tmp_path / "kp" / "kernels"
    kernels.mkdir(parents=True)
    db = kernels / "cache.db"
    db.write_bytes(content)
    os.utime(db, (0, 0))  # not one another process is creating right now
    with (
        caplog.at_level(logging.WARNING, logger="kernelpro.cache"),
        KernelCache(tmp_path / "kp") as cache,
    ):
        assert list(cache.scan()) == []
    assert "moved aside" in caplog.text
    (aside,) = [p for p in kernels.iterdir() if ".unreadable-" in p.name]
    assert aside.read_bytes() == content


def test_a_read_only_cache_is_read_and_refuses_writes(tmp_path, tanh_sg, monkeypatch, caplog):
    with KernelCache(tmp_path / "kp") as made:
        key = made.key_for(tanh_sg.key)
        made.put(key, python_artifact(3))

    def cannot_write(*args, **kwargs):
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr(store_module.diskcache, "Cache", cannot_write)
    with caplog.at_level(logging.WARNING, logger="kernelpro.cache"):
        cache = KernelCache(tmp_path / "kp")
    assert cache.read_only and "read-only" in caplog.text
    assert cache.get(key).launch["tag"] == 3
    assert [e.key for e in cache.entries()] == [key]
    with pytest.raises(CacheUnavailable, match="read-only"):
        cache.put(key, python_artifact(4))
    code, text = run_cache_cli("--cache-dir", str(tmp_path / "kp"), "ls")
    assert code == 0 and "1 entries" in text


def test_an_unopenable_cache_raises_cache_unavailable_with_the_way_out(tmp_path, monkeypatch):
    def cannot_open(*args, **kwargs):
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr(store_module.diskcache, "Cache", cannot_open)
    with pytest.raises(CacheUnavailable, match="search': 'off'"):
        KernelCache(tmp_path / "nowhere")


# -- the compile goes on -----------------------------------------------------------------------
class _BrokenCache:
    """A cache whose every read and write fails as a locked or full disk would."""

    directory = "/broken"

    def __init__(self, real: KernelCache) -> None:
        self.real = real
        self.misses = real.misses
        self.context = self  # the in-context verdicts fail to read too

    def rejected(self, digest):
        raise OSError(5, "Input/output error")

    def set_aside(self, digest, serve_held=False):
        raise OSError(5, "Input/output error")

    def key_for(self, subgraph_key):
        return self.real.key_for(subgraph_key)

    def lookup(self, key):
        raise sqlite3.OperationalError("database is locked")

    def put(self, key, artifact):
        raise OSError(28, "No space left on device")


def test_cache_faults_during_a_compile_warn_once_and_run_the_fallback(cache, tanh_sg, caplog):
    def searcher(sg):
        return python_artifact()

    finder = KernelFinder(_BrokenCache(cache), Options(search="on-miss"), python_loader, searcher)
    with caplog.at_level(logging.WARNING, logger="kernelpro.cache"):
        first = finder.find(tanh_sg)
        second = finder.find(tanh_sg)
    # the search's winner is still used though it could not be stored
    assert first is not None and second is not None
    x = torch.randn(8, 32)
    torch.testing.assert_close(first(x)[0], torch.tanh(x) * 3.0 + 1.0)
    assert caplog.text.count("going on without it") == 1


def test_an_unopenable_cache_on_the_gpu_path_runs_the_fallback(tmp_path, monkeypatch, caplog):
    def cannot_open(*args, **kwargs):
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr(store_module.diskcache, "Cache", cannot_open)
    monkeypatch.setattr(provider_module.torch.cuda, "is_available", lambda: True)
    options = Options(search="cache-only", cache_dir=str(tmp_path / "nowhere"))
    with caplog.at_level(logging.WARNING, logger="kernelpro"):
        provider = provider_module.default_provider(options)
    assert isinstance(provider, NullProvider)
    assert "runs on the fallback" in caplog.text


# -- hostile bundles ---------------------------------------------------------------------------
def _zip(path, members):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members:
            zf.writestr(name, data)
    return path


def test_a_zip_bomb_stops_at_the_total_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(limits_module, "MAX_BUNDLE_BYTES", 4 * 2**20)
    zeros = b"\0" * 2**20  # deflates to about 1 KB each
    bomb = _zip(tmp_path / "bomb.zip", [(f"entries/{i}.json", zeros) for i in range(8)])
    assert bomb.stat().st_size < 64 * 1024
    with pytest.raises(BundleError, match="limit MAX_BUNDLE_BYTES"):
        read_bundle(bomb)


def test_too_many_members_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(limits_module, "MAX_MEMBERS", 10)
    many = _zip(tmp_path / "many.zip", [(f"entries/{i}.json", b"{}") for i in range(11)])
    with pytest.raises(BundleError, match="more than 10 .*limit MAX_MEMBERS"):
        read_bundle(many)


def test_a_deeply_nested_manifest_is_refused_not_raised(tmp_path, tanh_sg, caplog):
    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / "extra").mkdir()
    bad = _zip(tmp_path / "extra" / "deep.zip", [("manifest.json", deep)])
    with pytest.raises(BundleError, match="nested more than 32 deep"):
        read_bundle(bad)
    # as an extra cache dir at compile time: one warning, a miss, no exception
    extra = KernelCache(tmp_path / "kp", extra_dirs=[tmp_path / "extra"])
    with caplog.at_level(logging.WARNING, logger="kernelpro.cache"), extra as cache:
        assert cache.get(cache.key_for(tanh_sg.key)) is None
    assert "nested more than 32 deep" in caplog.text


def test_a_member_name_twice_is_refused(tmp_path):
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tf:
        for body in (b"{}", b"[]"):
            info = tarfile.TarInfo("manifest.json")
            info.size = len(body)
            tf.addfile(info, io.BytesIO(body))
    (tmp_path / "twice.tar").write_bytes(data.getvalue())
    with pytest.raises(BundleError, match="appears twice"):
        read_bundle(tmp_path / "twice.tar")


def test_an_entry_listed_twice_is_refused_once(tmp_path, cache, tanh_sg):
    cache.put(cache.key_for(tanh_sg.key), python_artifact())
    out = tmp_path / "b.zip"
    export_bundle(cache, out)
    with zipfile.ZipFile(out) as zf:
        files = {n: zf.read(n) for n in zf.namelist()}
    manifest = json.loads(files["manifest.json"])
    manifest["entries"] = manifest["entries"] * 2
    files["manifest.json"] = json.dumps(manifest).encode()
    bundle = read_bundle(_zip(tmp_path / "dup.zip", files.items()))
    assert len(bundle.entries) == 1
    assert [r.reason for r in bundle.refused] == ["listed twice in manifest.json"]


def test_a_bundles_maker_is_read_as_a_claim_and_bounded(tmp_path, cache, tanh_sg):
    from kernelpro_backend.cache.transfer import import_bundle, read_built_by

    cache.put(cache.key_for(tanh_sg.key), python_artifact())
    out = tmp_path / "b.zip"
    export_bundle(cache, out)
    manifest = read_bundle(out).manifest
    assert set(manifest["built_by"]) == {"kernelpro", "gpu", "toolchain", "created"}
    with KernelCache(tmp_path / "other") as other:
        report = import_bundle(other, out, arch=cache.key_for(tanh_sg.key).arch)
    assert report.built_by == manifest["built_by"]
    assert read_built_by({"built_by": ["not", "a", "mapping"]}) == {}
    assert read_built_by({"built_by": {str(i): "x" for i in range(100)}}) == {}
    assert read_built_by({"built_by": {"gpu": "x" * 10_000}}) == {"gpu": "x" * 200}
