"""What kernelpro built into the cubin cache is known by content: a file is used only if its
bytes hash to the digest recorded when this kernelpro built it, in a directory only this user
can write; a file put there otherwise (no record, other bytes, a shared directory) is refused
and built again. Cubins read back by compile_cuda follow the same rule (the host libraries'
planted-library test is in test_host.py)."""

from __future__ import annotations

import logging
import os
import stat

import pytest

from kernelpro_backend import paths
from kernelpro_backend.runtime.cuda import built
from kernelpro_backend.runtime.cuda import compile as cuda_compile


@pytest.fixture
def name(tmp_path, monkeypatch):
    """A cache name under a private root, as compiled_path gives; this process remembers
    nothing it built before the test."""
    monkeypatch.setattr(built, "_BUILT", {})
    monkeypatch.setattr(built, "_WARNED", set())
    root = paths.private_dir(tmp_path / "cubin")
    return root / "ab" / ("ab" + "0" * 62 + ".cubin")


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_what_is_stored_is_read_back_here_and_in_another_process(name, monkeypatch):
    target = built.store_built(name, b"cubin bytes")
    assert target != name and not name.exists() and target.read_bytes() == b"cubin bytes"
    assert _mode(target) == _mode(built.record_path(name)) == 0o600
    assert _mode(name.parent) == _mode(name.parent.parent) == 0o700
    assert built.read_built(name) == (target, b"cubin bytes")
    monkeypatch.setattr(built, "_BUILT", {})  # another process: the record on disk
    assert built.read_built(name) == (target, b"cubin bytes")


def test_a_file_at_the_cache_name_without_a_record_is_refused(name, caplog):
    name.parent.mkdir(mode=0o700)
    name.write_bytes(b"planted")
    with caplog.at_level(logging.WARNING, logger="kernelpro"):
        assert built.read_built(name) is None
        assert built.read_built(name) is None  # a build may be polled: one line
    assert caplog.text.count("no record of building it") == 1


def test_bytes_that_no_longer_hash_to_the_record_are_refused(name, caplog, monkeypatch):
    target = built.store_built(name, b"cubin bytes")
    target.write_bytes(b"other code")
    with caplog.at_level(logging.WARNING, logger="kernelpro"):
        assert built.read_built(name) is None
    monkeypatch.setattr(built, "_BUILT", {})
    assert built.read_built(name) is None  # nor through the record on disk
    assert "do not hash to the digest recorded" in caplog.text
    assert built.read_built(name) is None


def test_a_directory_others_can_write_is_refused_for_reads_and_writes(name, caplog):
    built.store_built(name, b"cubin bytes")
    name.parent.chmod(0o777)
    with caplog.at_level(logging.WARNING, logger="kernelpro"):
        assert built.read_built(name) is None
    assert "not private to this user" in caplog.text and "lets other users write" in caplog.text
    with pytest.raises(paths.UnsafeDirectory):
        built.store_built(name, b"more")


@pytest.mark.skipif(os.getuid() != 0, reason="giving a directory to another user needs root")
def test_a_cache_root_of_another_user_is_refused(name):
    built.store_built(name, b"cubin bytes")
    os.chown(name.parent.parent, 65534, 65534)
    assert built.read_built(name) is None


def test_a_cubin_root_others_can_write_is_replaced_by_a_private_one(tmp_path, caplog):
    shared = tmp_path / "shared-cubins"
    shared.mkdir()
    shared.chmod(0o777)
    with caplog.at_level(logging.WARNING, logger="kernelpro"):
        path = cuda_compile.compiled_path("src", "sm_90a", "nvcc x", (), shared, ".cubin")
        again = cuda_compile.compiled_path("src", "sm_90a", "nvcc x", (), shared, ".cubin")
    assert shared not in path.parents and path == again
    assert paths.unsafe_reason(path.parent.parent) is None
    assert caplog.text.count("lets other users write") == 1
    fresh = tmp_path / "new" / "cubins"
    path = cuda_compile.compiled_path("src", "sm_90a", "nvcc x", (), fresh, ".cubin")
    assert path.parent.parent == fresh and _mode(fresh) == 0o700


def test_compile_cuda_recompiles_over_a_planted_cubin(tmp_path, monkeypatch, caplog):
    """The cubin cache's names are predictable: a cubin put at one is never loaded."""
    monkeypatch.setattr(built, "_BUILT", {})
    monkeypatch.setattr(cuda_compile, "find_nvcc", lambda: "/opt/fake/nvcc")
    monkeypatch.setattr(cuda_compile, "nvcc_version", lambda nvcc: "nvcc fake")
    compiled = []

    def run_nvcc(nvcc, source, flags, timeout_s, output="candidate.cubin"):
        compiled.append(source)
        return b"\x7fELF ours kp_kernel\0"

    monkeypatch.setattr(cuda_compile, "run_nvcc", run_nvcc)
    root = tmp_path / "cubin"
    name = cuda_compile.compiled_path(
        "src", "sm_90a", "nvcc fake", cuda_compile.nvcc_flags("sm_90a"), root, ".cubin"
    )
    name.parent.mkdir(parents=True)
    name.write_bytes(b"\x7fELF theirs kp_kernel\0")
    with caplog.at_level(logging.WARNING, logger="kernelpro"):
        cubin = cuda_compile.compile_cuda("src", "sm_90a", kernels=["kp_kernel"], cubin_dir=root)
    assert cubin.data == b"\x7fELF ours kp_kernel\0" and not cubin.cached and compiled
    assert "no record of building it" in caplog.text
    again = cuda_compile.compile_cuda("src", "sm_90a", kernels=["kp_kernel"], cubin_dir=root)
    assert again.cached and again.data == cubin.data and len(compiled) == 1
