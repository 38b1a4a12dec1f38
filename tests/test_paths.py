"""paths.py: `options={"cache_dir": X}` moves every file kernelpro writes under X — the kernel
store, the miss manifest, cubins, search memory and logs, ceilings — in this process and in the
workers (their start arguments carry the layout; nobody changes os.environ); and the one atomic
write leaves the old file or the new one, never half of one and no temporary file."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

import pytest

from kernelpro_backend.cache import KernelCache
from kernelpro_backend.options import Options
from kernelpro_backend.paths import CacheLayout, atomic_write, resolve_cache_dir
from kernelpro_backend.profilers.ceilings import Ceilings
from kernelpro_backend.runtime import WorkerPool, WorkerSetup
from kernelpro_backend.runtime import pool as pool_module
from kernelpro_backend.search import MoveRecord, SearchMemory, default_memory_path


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fake home with no cache variables set: a file that escapes cache_dir lands here."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("KERNELPRO_CACHE_DIR", raising=False)
    monkeypatch.delenv("KERNELPRO_CUBIN_DIR", raising=False)
    return home


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_the_cache_directory_rule(tmp_path, home):
    env = {"KERNELPRO_CACHE_DIR": str(tmp_path / "env")}
    assert resolve_cache_dir(tmp_path / "arg", env) == tmp_path / "arg"
    assert resolve_cache_dir(None, env) == tmp_path / "env"
    assert resolve_cache_dir(None, {}) == home / ".cache" / "kernelpro"
    assert CacheLayout.of(None, {"KERNELPRO_CUBIN_DIR": str(tmp_path / "c")}).cubin_root == (
        tmp_path / "c"
    )


def test_every_path_of_the_options_cache_dir_lies_under_it(tmp_path):
    chosen = tmp_path / "chosen"
    options = Options.resolve(
        options={"cache_dir": str(chosen)}, environ={"KERNELPRO_CACHE_DIR": str(tmp_path / "env")}
    )
    layout = WorkerSetup.of(options).layout
    # WorkerSetup.of reads os.environ only for KERNELPRO_CUBIN_DIR; this test's has none.
    assert "KERNELPRO_CUBIN_DIR" not in os.environ
    paths = [
        layout.kernels,
        layout.misses,
        layout.search_memory,
        layout.logs / "k.jsonl",
        layout.cubin("ab" * 32),
        layout.ceilings("NVIDIA H100 80GB HBM3"),
        layout.cubin_root,
        default_memory_path(options.cache_dir),
        Ceilings.cache_path("NVIDIA H100 80GB HBM3", options.cache_dir),
    ]
    for path in paths:
        assert path.is_relative_to(chosen), path
    assert layout.ceilings("NVIDIA H100 80GB HBM3").name == "ceilings-NVIDIA-H100-80GB-HBM3.json"


def test_real_writers_write_only_under_the_cache_dir(tmp_path, home):
    import torch
    from helpers import subgraphs_of

    (tanh_sg,) = subgraphs_of(torch.tanh, torch.randn(8, 40), train=False)
    chosen = tmp_path / "chosen"
    options = Options.resolve(options={"cache_dir": str(chosen)}, environ={})
    with KernelCache(options.cache_dir) as cache:
        cache.misses.record(cache.key_for(tanh_sg.key), tanh_sg, reason="test")
    memory = SearchMemory(default_memory_path(options.cache_dir))
    memory.record(MoveRecord("pointwise", "tanh", None, "block:up", 0.1))
    written = _files(chosen)
    assert chosen / "misses.jsonl" in written
    assert chosen / "search_memory.jsonl" in written
    assert any(p.is_relative_to(chosen / "kernels") for p in written)
    assert _files(home) == []  # nothing went to ~/.cache/kernelpro


def test_the_searcher_and_its_workers_get_the_options_cache_dir(tmp_path, home, monkeypatch):
    import torch
    from helpers import subgraphs_of

    import kernelpro_backend.tuner.searcher as searcher_module

    chosen = tmp_path / "chosen"
    options = Options.resolve(
        options={"cache_dir": str(chosen), "progress": False, "worker_start_timeout_s": 7},
        environ={},
    )
    leased = {}

    @contextlib.contextmanager
    def fake_lease(workers, timeout_s, idle_s, **settings):
        leased.update(settings)
        raise _Stop
        yield  # pragma: no cover

    monkeypatch.setattr(searcher_module, "lease_pool", fake_lease)
    (sg,) = subgraphs_of(lambda x: torch.softmax(x, -1), torch.randn(8, 40), train=False)
    with pytest.raises(_Stop):
        searcher_module.SubgraphSearcher(options)(sg)
    assert leased["setup"].layout == CacheLayout(chosen, chosen / "cubin")
    assert leased["setup"].nvcc_timeout_s == options.nvcc_timeout_s
    assert leased["start_timeout_s"] == 7
    assert (chosen / "logs").is_dir()
    assert _files(home) == []


class _Stop(Exception):
    pass


class _FakeContext:
    """multiprocessing's spawn context, recording what each worker would be started with."""

    def __init__(self):
        self.started = []

    def Pipe(self, duplex=True):  # noqa: N802 - the multiprocessing name
        return _FakeConn(), _FakeConn()

    def Process(self, target, args, daemon):  # noqa: N802
        self.started.append((target, args))
        return _FakeProcess()


class _FakeConn:
    closed = False

    def close(self):
        pass

    def send(self, message):
        pass


class _FakeProcess:
    def start(self):
        pass

    def join(self, timeout=None):
        pass

    def is_alive(self):
        return False

    def kill(self):
        pass


def _fake_start(monkeypatch) -> _FakeContext:
    """multiprocessing's context and the isolated worker process faked: what each worker would
    be started with is recorded, nothing starts."""
    ctx = _FakeContext()
    monkeypatch.setattr(pool_module.mp, "get_context", lambda method: ctx)
    monkeypatch.setattr(pool_module, "IsolatedProcess", ctx.Process)
    return ctx


def test_the_worker_start_arguments_carry_the_layout(tmp_path, monkeypatch):
    ctx = _fake_start(monkeypatch)
    setup = WorkerSetup(CacheLayout.of(tmp_path / "chosen", {}), nvcc_timeout_s=12.0)
    pool = WorkerPool(workers=2, setup=setup, start_timeout_s=9.0)
    assert pool.start_timeout_s == 9.0
    assert [args[2] for _, args in ctx.started] == [setup, setup]
    assert all(target is pool_module.worker_main for target, _ in ctx.started)
    pool.close()


def test_a_pool_without_setup_uses_this_process_layout(tmp_path, monkeypatch):
    ctx = _fake_start(monkeypatch)
    monkeypatch.setenv("KERNELPRO_CACHE_DIR", str(tmp_path / "env"))
    monkeypatch.delenv("KERNELPRO_CUBIN_DIR", raising=False)
    WorkerPool(workers=1).close()
    ((_, args),) = ctx.started
    assert args[2].layout.root == tmp_path / "env"


def test_atomic_write_replaces_whole_files_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "deep" / "file.json"
    atomic_write(path, "first")
    atomic_write(path, b"second")
    assert path.read_bytes() == b"second"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    atomic_write(path, "private", mode=0o600)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["file.json"]


def test_a_failed_atomic_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "file"
    atomic_write(path, "old")

    def fail(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


def test_the_variables_paths_reads_are_known_to_options():
    """options warns about KERNELPRO_* names no option reads; the ones paths.py reads itself
    must not be among them (options sits below paths and lists them by hand)."""
    from kernelpro_backend.options import ENV_PREFIX, OTHER_VARIABLES
    from kernelpro_backend.paths import CACHE_DIR_ENV, CUBIN_DIR_ENV

    assert CUBIN_DIR_ENV.removeprefix(ENV_PREFIX) in OTHER_VARIABLES
    assert CACHE_DIR_ENV.removeprefix(ENV_PREFIX).lower() in Options.field_names()
