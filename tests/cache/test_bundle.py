"""Bundles: round trip, tamper rejection (entry bytes, manifest), foreign arch refused, another
toolchain imported as unproved (re-proved before first use)."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest
from archives import tar_members, tar_repack
from graphs import python_artifact, with_arch

from kernelpro_backend.cache import (
    BundleError,
    KernelCache,
    Toolchain,
    export_bundle,
    import_bundle,
    read_bundle,
)

OLD = Toolchain("2.0.0", "2.0.0", "11.8")


@pytest.fixture
def filled(tmp_path, tanh_sg, linear_sg):
    """A cache with three sm_90 entries: two tanh variants and one linear+softmax."""
    with KernelCache(tmp_path / "src") as src:
        keys = [
            with_arch(src.key_for(tanh_sg.key), "sm_90"),
            with_arch(src.key_for(dataclasses.replace(tanh_sg.key, precision="tf32")), "sm_90"),
            with_arch(src.key_for(linear_sg.key), "sm_90"),
        ]
        patterns = [tanh_sg.pattern, tanh_sg.pattern, linear_sg.pattern]
        for i, (key, pattern) in enumerate(zip(keys, patterns, strict=True)):
            src.put(
                key, dataclasses.replace(python_artifact(i, binary=b"\x7fELF" * 9), pattern=pattern)
            )
        yield src, keys


@pytest.mark.parametrize("name", ["b.tar", "b.tar.gz", "b.zip"])
def test_round_trip(tmp_path, filled, name):
    src, keys = filled
    written = export_bundle(src, tmp_path / name)
    assert len(written) == 3
    manifest = read_bundle(tmp_path / name).manifest
    assert manifest["arch"] == ["sm_90"]
    assert manifest["built_by"]["toolchain"] == str(src.toolchain)
    assert {e["digest"] for e in manifest["entries"]} == {k.digest for k in keys}
    with KernelCache(tmp_path / "dst") as dst:
        report = import_bundle(dst, tmp_path / name, arch="sm_90")
        assert report.refused == []
        for key in keys:
            # The same kernel, marked as imported: not proved on this machine until re-proved.
            got, made = dst.get(key), src.get(key)
            assert got is not None and made is not None
            assert got.provenance.origin == "import" and made.provenance.origin == "search"
            assert dataclasses.replace(got, provenance=made.provenance) == made
            assert "imported" in (dst.lookup(key).unproved or "")
            assert src.lookup(key).unproved is None


def test_export_filters(tmp_path, filled, linear_sg):
    src, keys = filled
    only = export_bundle(src, tmp_path / "p.tar", pattern=linear_sg.pattern)
    assert [e.key for e in only] == [keys[2]]
    assert export_bundle(src, tmp_path / "k.tar", kind="nope") == []
    assert len(export_bundle(src, tmp_path / "a.tar", arch="sm_90")) == 3
    assert export_bundle(src, tmp_path / "a80.tar", arch="sm_80") == []


def test_kernels_that_lost_inside_their_model_are_not_exported(tmp_path, filled):
    src, keys = filled
    src.context.reject(keys[1].digest, pattern="pointwise", why="slower in its model")
    written = export_bundle(src, tmp_path / "c.tar")
    assert {e.key.digest for e in written} == {keys[0].digest, keys[2].digest}


def test_kernels_a_warmup_still_holds_are_not_exported_until_settled(tmp_path, filled):
    """The importing cache has no hold on them: a kernel no step has vouched for stays home."""
    src, keys = filled
    src.context.hold(keys[2].digest, pattern="pointwise", model="Net")
    written = export_bundle(src, tmp_path / "c.tar")
    assert {e.key.digest for e in written} == {keys[0].digest, keys[1].digest}
    src.context.settle([keys[2].digest])
    assert len(export_bundle(src, tmp_path / "d.tar")) == 3


LM_OFF = {"rewrite_linear_cross_entropy": False}


def test_a_graphs_rewrite_verdict_travels_with_the_bundle_and_a_local_one_stays(tmp_path, filled):
    """A warm-up that measured a graph faster without the LM-head rewrite ships that verdict:
    the importing machine compiles that graph as the warm-up's did. A verdict the importing
    cache measured itself is not replaced."""
    src, _ = filled
    src.context.set_graph_options("a" * 32, LM_OFF, model="GPT", why="5.2 ms against 4.9")
    src.context.set_graph_options("b" * 32, LM_OFF, model="GPT", why="theirs")
    export_bundle(src, tmp_path / "v.tar")
    listed = read_bundle(tmp_path / "v.tar").manifest["graph_verdicts"]
    assert [v["fingerprint"] for v in listed] == ["a" * 32, "b" * 32]
    with KernelCache(tmp_path / "dst") as dst:
        dst.context.set_graph_options("b" * 32, {"rewrite_attention": False}, why="ours")
        report = import_bundle(dst, tmp_path / "v.tar", arch="sm_90")
        assert [v.fingerprint for v in report.graph_verdicts] == ["a" * 32]
        assert report.refused == []
    with KernelCache(tmp_path / "dst") as again:  # written to disk, read by a later process
        assert again.context.graph_options("a" * 32) == LM_OFF
        assert again.context.graph_options("b" * 32) == {"rewrite_attention": False}


@pytest.mark.parametrize(
    "verdict, reason",
    [
        ({"fingerprint": "../" * 11, "options": LM_OFF}, "malformed graph fingerprint"),
        ({"fingerprint": "c" * 32, "options": {"search": "on-miss"}}, "may only turn off"),
        ({"fingerprint": "c" * 32, "options": {"rewrite_attention": True}}, "may only turn off"),
        ({"fingerprint": "c" * 32, "options": {}}, "may only turn off"),
        ("c" * 32, "malformed graph fingerprint"),
    ],
)
def test_a_bundles_graph_verdict_can_only_turn_a_rewrite_off(tmp_path, filled, verdict, reason):
    src, _ = filled
    export_bundle(src, tmp_path / "v.tar")

    def change(files):
        manifest = json.loads(files["manifest.json"])
        manifest["graph_verdicts"] = [verdict]
        files["manifest.json"] = json.dumps(manifest).encode()

    _rewrite(tmp_path / "v.tar", change)
    with KernelCache(tmp_path / "dst") as dst:
        report = import_bundle(dst, tmp_path / "v.tar", arch="sm_90")
        assert report.graph_verdicts == [] and dst.context.graph_verdicts() == {}
        assert [r.reason for r in report.refused if reason in r.reason], report.refused
        assert len(report.imported) == 3  # the entries still come in


def test_a_bundles_verdicts_are_written_at_once_and_too_many_are_refused(
    tmp_path, filled, monkeypatch
):
    """Each verdict written alone would rewrite context.json once per verdict: a bundle's
    thousand would write the growing file a thousand times. One write; past the cap, none."""
    from kernelpro_backend.cache.bundle import MAX_GRAPH_VERDICTS
    from kernelpro_backend.cache.context import ContextVerdicts

    src, _ = filled
    export_bundle(src, tmp_path / "v.tar")

    def with_verdicts(count):
        def change(files):
            manifest = json.loads(files["manifest.json"])
            manifest["graph_verdicts"] = [
                {"fingerprint": f"{i:032x}", "options": LM_OFF} for i in range(count)
            ]
            files["manifest.json"] = json.dumps(manifest).encode()

        return change

    saves = []
    real_save = ContextVerdicts._save
    monkeypatch.setattr(
        ContextVerdicts, "_save", lambda self, records: (saves.append(1), real_save(self, records))
    )
    _rewrite(tmp_path / "v.tar", with_verdicts(MAX_GRAPH_VERDICTS))
    with KernelCache(tmp_path / "dst") as dst:
        saves.clear()
        report = import_bundle(dst, tmp_path / "v.tar", arch="sm_90")
        assert len(report.graph_verdicts) == MAX_GRAPH_VERDICTS and len(saves) == 1
    _rewrite(tmp_path / "v.tar", with_verdicts(MAX_GRAPH_VERDICTS + 1))
    with KernelCache(tmp_path / "dst2") as dst:
        report = import_bundle(dst, tmp_path / "v.tar", arch="sm_90")
        assert report.graph_verdicts == [] and dst.context.graph_verdicts() == {}
        assert any("not ours" in r.reason for r in report.refused)


def _rewrite(path, change):
    """Re-pack a tar bundle after `change(files)` edits its members in place."""
    files = tar_members(path)
    change(files)
    tar_repack(path, files)


def _manifest_edit(edit):
    def change(files):
        manifest = json.loads(files["manifest.json"])
        edit(manifest, files)
        files["manifest.json"] = json.dumps(manifest).encode()

    return change


def _first_entry(files):
    return sorted(n for n in files if n.startswith("entries/"))[0]


def _import(tmp_path, bundle):
    with KernelCache(tmp_path / "dst") as dst:
        report = import_bundle(dst, bundle, arch="sm_90")
        stored = len(list(dst.entries()))
    return report, stored


def _bump_ms(files):
    name = _first_entry(files)
    files[name] = files[name].replace(b'"kernel_ms":0.01', b'"kernel_ms":0.001')


def _bump_ms_and_fix_manifest(files):
    _bump_ms(files)
    name = _first_entry(files)
    manifest = json.loads(files["manifest.json"])
    for item in manifest["entries"]:
        if item["file"] == name:
            item["sha256"] = hashlib.sha256(files[name]).hexdigest()
    files["manifest.json"] = json.dumps(manifest).encode()


def _change_manifest_key(manifest, files):
    manifest["entries"][0]["key"]["subgraph"]["precision"] = "tf32x3"


def _change_manifest_sha(manifest, files):
    manifest["entries"][0]["sha256"] = "0" * 64


def _add_unlisted(files):
    name = _first_entry(files)
    files[name.replace(".json", "x.json")] = files[name]


@pytest.mark.parametrize(
    "change, reason",
    [
        (_bump_ms, "sha256 mismatch"),
        (_bump_ms_and_fix_manifest, "bad checksum"),
        (_manifest_edit(_change_manifest_key), "key differs"),
        (_manifest_edit(_change_manifest_sha), "sha256 mismatch"),
        (_add_unlisted, "not listed"),
    ],
)
def test_tampered_entries_are_refused_by_name(tmp_path, filled, change, reason):
    src, _ = filled
    bundle = tmp_path / "b.tar"
    export_bundle(src, bundle)
    _rewrite(bundle, change)
    report, stored = _import(tmp_path, bundle)
    assert len(report.refused) == 1
    assert reason in report.refused[0].reason
    assert report.refused[0].name.startswith("entries/")
    expected_imported = 3 if change is _add_unlisted else 2
    assert len(report.imported) == stored == expected_imported


def test_unreadable_manifest_refuses_the_bundle(tmp_path, filled):
    src, _ = filled
    bundle = tmp_path / "b.tar"
    export_bundle(src, bundle)

    def garble(files):
        files["manifest.json"] = b"{not json"

    _rewrite(bundle, garble)
    with pytest.raises(BundleError, match="unparsable manifest.json"):
        read_bundle(bundle)
    (tmp_path / "junk.tar").write_bytes(b"nothing here")
    with pytest.raises(BundleError, match="cannot read archive"):
        read_bundle(tmp_path / "junk.tar")


def test_foreign_arch_is_refused(tmp_path, filled):
    src, _ = filled
    export_bundle(src, tmp_path / "b.zip")
    with KernelCache(tmp_path / "dst") as dst:
        report = import_bundle(dst, tmp_path / "b.zip", arch="sm_80")
        assert report.imported == [] and len(list(dst.entries())) == 0
    assert len(report.refused) == 3
    for refusal in report.refused:
        assert "sm_90" in refusal.reason and "sm_80" in refusal.reason
        assert refusal.name.startswith("entries/")


def test_another_toolchain_is_imported_under_the_same_key_as_unproved(tmp_path, tanh_sg):
    """The key holds what decides the kernel; the toolchain is provenance. An entry made under
    another toolchain is found under this machine's key, and must be re-proved before use."""
    with KernelCache(tmp_path / "old", toolchain=OLD, gpu="NVIDIA H200") as old:
        artifact = dataclasses.replace(python_artifact(toolchain=OLD), pattern=tanh_sg.pattern)
        key = with_arch(old.key_for(tanh_sg.key), "sm_90")
        old.put(key, artifact)
        assert len(export_bundle(old, tmp_path / "old.tar")) == 1
    with KernelCache(tmp_path / "dst", gpu="NVIDIA H100 80GB HBM3") as dst:
        assert dst.key_for(tanh_sg.key) == old.key_for(tanh_sg.key)
        report = import_bundle(dst, tmp_path / "old.tar", arch="sm_90")
        assert report.refused == [] and len(report.imported) == 1
        hit = dst.lookup(key)
        assert hit is not None and hit.artifact.provenance.toolchain == OLD
        assert "imported" in (hit.unproved or "")
