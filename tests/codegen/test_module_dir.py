"""Generated modules are imported only from a directory private to this user, and only when the
file there is byte for byte the source about to run: another local user who plants
kp_<sha>.py first, or makes the shared directory first, gets none of their code executed."""

from __future__ import annotations

import importlib
import os
import stat

import pytest

from kernelpro_backend import paths
from kernelpro_backend.codegen.spec import RenderedKernel

# the module, not codegen's `build` function of the same name
build = importlib.import_module("kernelpro_backend.codegen.build")

SOURCE = "def entry(*inputs):\n    return [x + 1 for x in inputs]\n"


@pytest.fixture
def private(tmp_path, monkeypatch):
    """A private codegen directory that load_module uses instead of $TMPDIR's."""
    directory = paths.private_dir(tmp_path / "codegen")
    monkeypatch.setattr(build, "codegen_dir", lambda: directory)
    return directory


def test_a_planted_module_is_not_executed(private, tmp_path):
    marker = tmp_path / "planted-code-ran"
    planted = build.module_file(SOURCE, private)  # the name the loader will look for
    planted.write_text(
        f"open({str(marker)!r}, 'w').close()\ndef entry(*inputs):\n    return ['planted']\n"
    )
    entry = build.load_module(RenderedKernel("triton", SOURCE, "entry"))
    assert entry(1, 2) == [2, 3]
    assert not marker.exists()
    assert planted.read_text() == SOURCE  # rewritten with what we rendered


def test_an_identical_module_is_reused(private):
    first = build.module_file(SOURCE, private)
    before = first.stat().st_mtime_ns
    assert build.module_file(SOURCE, private) == first
    assert first.stat().st_mtime_ns == before
    assert stat.S_IMODE(first.stat().st_mode) == 0o600


def test_a_directory_others_can_write_is_not_used(tmp_path, monkeypatch):
    shared = tmp_path / f"kernelpro-codegen-{os.getuid()}"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(paths.UnsafeDirectory, match="lets other users write"):
        paths.private_dir(shared)
    monkeypatch.setattr(paths.tempfile, "gettempdir", lambda: str(tmp_path))
    paths.codegen_dir.cache_clear()
    try:
        chosen = paths.codegen_dir()
    finally:
        paths.codegen_dir.cache_clear()
    assert chosen != shared
    assert paths.unsafe_reason(chosen) is None
    assert stat.S_IMODE(chosen.stat().st_mode) == 0o700


def test_a_new_directory_is_created_private(tmp_path):
    made = paths.private_dir(tmp_path / "fresh")
    assert stat.S_IMODE(made.stat().st_mode) & 0o077 == 0


def test_a_link_is_not_used(tmp_path):
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(paths.UnsafeDirectory, match="not a directory"):
        paths.private_dir(tmp_path / "link")


@pytest.mark.skipif(os.getuid() != 0, reason="giving a directory to another user needs root")
def test_a_directory_of_another_user_is_not_used(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(paths.UnsafeDirectory, match="owned by uid 65534"):
        paths.private_dir(theirs)
