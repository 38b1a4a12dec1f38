"""`kernelpro cache ...` on caches that cannot be used: a damaged or directory `cache.db`, a
cache path that cannot be a directory, a full disk, a read-only store, a bad option. Each
command ends in one line on stderr saying what is wrong and what to do, exit 1, no traceback.
(Compiles warn and fall back instead: tests/cache/test_store_faults.py and the finder's.)"""

from __future__ import annotations

import dataclasses
import errno
import os
import sqlite3
import subprocess
import sys

import diskcache
import pytest
from graphs import python_artifact, with_arch
from helpers import run_cache_cli

from kernelpro_backend.cache import KernelCache
from kernelpro_backend.cache import bundle as bundle_module
from kernelpro_backend.cache import store as store_module
from kernelpro_backend.cli import cache as cli_cache

COMMANDS = {
    "ls": ["ls"],
    "show": ["show", "ab"],
    "verify": ["verify", "--integrity-only"],
    "prune": ["prune"],
    "import": ["import", "BUNDLE", "--arch", "sm_90"],
    "misses": ["misses"],
    "export": ["export", "--out", "OUT"],
}


@pytest.fixture
def cache_dir(tmp_path, tanh_sg, linear_sg):
    """A cache of two entries and one corrupt row, and a bundle of its entries."""
    path = tmp_path / "c"
    with KernelCache(path) as cache:
        for i, sg in enumerate((tanh_sg, linear_sg)):
            artifact = dataclasses.replace(python_artifact(i), pattern=sg.pattern, kind=sg.kind)
            cache.put(with_arch(cache.key_for(sg.key), "sm_90"), artifact)
    code, _ = run_cache_cli("--cache-dir", str(path), "export", "--out", str(tmp_path / "b.tar"))
    assert code == 0
    with KernelCache(path) as cache:
        cache.put_raw("f" * 64, b"garbage")  # a row prune drops
    return path


def _argv(command: str, tmp_path) -> list[str]:
    swap = {"BUNDLE": str(tmp_path / "b.tar"), "OUT": str(tmp_path / "out.tar")}
    return [swap.get(a, a) for a in COMMANDS[command]]


def _one_line(capsys, *words: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("kernelpro cache ") and all(w in err for w in words), err
    return err


def _damage(kind: str, path) -> str:
    """Damage the cache at `path`; returns the --cache-dir to give."""
    db = path / "kernels" / "cache.db"
    if kind == "directory-db":
        db.unlink()
        db.mkdir()
    elif kind == "truncated-db":
        db.write_bytes(db.read_bytes()[:200])  # a SQLite header, then nothing
    elif kind == "not-a-directory":
        (path.parent / "a-file").write_text("x")
        return str(path.parent / "a-file" / "cache")  # cannot be created, even by root
    return str(path)


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("kind", ["directory-db", "truncated-db", "not-a-directory"])
def test_a_cache_that_cannot_be_opened_ends_every_command_in_one_line(
    cache_dir, tmp_path, capsys, kind, command
):
    where = _damage(kind, cache_dir)
    code, printed = run_cache_cli("--cache-dir", where, *_argv(command, tmp_path))
    assert code == 1 and printed == ""
    _one_line(capsys, f"kernelpro cache {command}: cannot use the kernel cache in", "--cache-dir")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a mode 000 directory all the same")
def test_an_unreadable_cache_directory_ends_in_one_line(cache_dir, tmp_path, capsys):
    os.chmod(cache_dir / "kernels", 0)
    try:
        code, _ = run_cache_cli("--cache-dir", str(cache_dir), "ls")
    finally:
        os.chmod(cache_dir / "kernels", 0o700)
    assert code == 1
    _one_line(capsys, "--cache-dir")


@pytest.mark.parametrize(
    "error",
    [OSError(errno.ENOSPC, "No space left on device"),
     sqlite3.OperationalError("database or disk is full")],
    ids=["ENOSPC", "sqlite-full"],
)  # fmt: skip
@pytest.mark.parametrize("command", ["import", "prune", "export", "verify"])
def test_a_full_disk_ends_a_writing_command_in_one_line(
    cache_dir, tmp_path, capsys, monkeypatch, command, error
):
    def full(*args, **kwargs):
        raise error

    for name in ("set", "delete"):
        monkeypatch.setattr(diskcache.Cache, name, full)
    monkeypatch.setattr(bundle_module, "atomic_write", full)
    monkeypatch.setattr(cli_cache, "admit", lambda artifact: None)  # let the entries in
    argv = _argv(command, tmp_path)
    if command == "verify":
        argv = ["verify"]  # the validator below rejects: verify deletes
    code, _ = run_cache_cli("--cache-dir", str(cache_dir), *argv, validator=lambda entry: False)
    assert code == 1
    words = ("is full", "free space") if isinstance(error, OSError) else ("disk is full",)
    _one_line(capsys, f"kernelpro cache {command}: ", *words)


@pytest.mark.parametrize("command", ["import", "prune", "verify"])
def test_a_read_only_cache_ends_a_writing_command_in_one_line(
    cache_dir, tmp_path, capsys, monkeypatch, command
):
    """A store diskcache cannot open for writing is read read-only (as a compile reads it);
    a command that must write says so."""

    def read_only(*args, **kwargs):
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr(store_module.diskcache, "Cache", read_only)
    monkeypatch.setattr(cli_cache, "admit", lambda artifact: None)
    code, text = run_cache_cli("--cache-dir", str(cache_dir), "ls")
    assert code == 0 and "2 entries" in text  # reading still works
    argv = ["verify"] if command == "verify" else _argv(command, tmp_path)
    code, _ = run_cache_cli("--cache-dir", str(cache_dir), *argv, validator=lambda entry: False)
    assert code == 1
    _one_line(capsys, f"kernelpro cache {command}: ", "is read-only", "--cache-dir")


def test_a_bad_option_ends_import_in_one_line(cache_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KERNELPRO_TRUSTED_BUNDLE_KEYS", str(tmp_path / "no-such-key"))
    code, _ = run_cache_cli("--cache-dir", str(tmp_path / "d"), *_argv("import", tmp_path))
    assert code == 1
    _one_line(capsys, "KERNELPRO_TRUSTED_BUNDLE_KEYS", "no key file")


def test_the_command_line_itself_prints_no_traceback(cache_dir, tmp_path):
    where = _damage("truncated-db", cache_dir)
    run = subprocess.run(
        [sys.executable, "-m", "kernelpro_backend.cli", "cache", "--cache-dir", where, "ls"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 1 and run.stdout == "" and run.stderr.count("\n") == 1, run.stderr
    assert "database disk image is malformed" in run.stderr
