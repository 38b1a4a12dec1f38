"""Workers run code from outside: they start without the user's secrets in their environment
(not even in /proc/self/environ) and the pool's workers use that start."""

from __future__ import annotations

import multiprocessing as mp
import os
import sys

import pytest
from isolation_child import report

from kernelpro_backend.runtime import pool as pool_module
from kernelpro_backend.runtime.isolation import IsolatedProcess, worker_environ

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_the_allow_list_keeps_what_workers_need_and_drops_the_rest():
    env = {
        "PATH": "/usr/bin", "HOME": "/home/u", "CUDA_VISIBLE_DEVICES": "1",
        "TRITON_INTERPRET": "1", "KERNELPRO_CACHE_DIR": "/c", "LD_LIBRARY_PATH": "/l",
        "OPENAI_API_KEY": "sk-secret", "AWS_SECRET_ACCESS_KEY": "x", "HF_TOKEN": "hf",
        "SSH_AUTH_SOCK": "/tmp/agent", "GITHUB_TOKEN": "gh", "LD_PRELOAD": "/evil.so",
    }  # fmt: skip
    kept = worker_environ(env)
    assert set(kept) == {
        "PATH", "HOME", "CUDA_VISIBLE_DEVICES", "TRITON_INTERPRET", "KERNELPRO_CACHE_DIR",
        "LD_LIBRARY_PATH",
    }  # fmt: skip


def test_a_spawned_worker_holds_no_secret_of_the_parent(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-do-not-leak")
    monkeypatch.setenv("TRITON_KEEP_ME", "yes")
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    process = IsolatedProcess(target=report, args=(child,), daemon=True)
    process.start()
    child.close()
    seen = parent.recv()
    process.join(30)
    assert process.exitcode == 0
    assert "OPENAI_API_KEY" not in seen["environ"] and b"sk-do-not-leak" not in seen["proc"]
    assert seen["environ"]["TRITON_KEEP_ME"] == "yes"
    assert seen["environ"].get("PATH") == os.environ.get("PATH")


def test_the_pool_starts_its_workers_isolated(monkeypatch):
    started = []

    class Recording(IsolatedProcess):
        def start(self) -> None:
            started.append(type(self))
            raise RuntimeError("not started: the test only checks the class")

    monkeypatch.setattr(pool_module, "IsolatedProcess", Recording)
    with pytest.raises(RuntimeError, match="not started"):
        pool_module.WorkerPool(workers=1)
    assert started == [Recording]


def test_a_relative_cache_directory_stays_the_users_after_the_worker_moves(tmp_path, monkeypatch):
    from kernelpro_backend.paths import CacheLayout
    from kernelpro_backend.runtime.worker_setup import WorkerSetup

    monkeypatch.chdir(tmp_path)
    setup = WorkerSetup(CacheLayout.of("kp", environ={})).absolute()
    assert setup.layout.root == tmp_path / "kp" and setup.layout.cubin_root == tmp_path / "kp/cubin"
