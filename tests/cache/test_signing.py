"""Bundle signatures: a signed export verifies with its key, a modified bundle fails its MAC and
is refused, unsigned and unknown-key bundles are refused when a signature is required, key files
are checked, a malformed signature member refuses the bundle, and extra cache directories skip
bundles whose signature does not allow them (one warning each)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging

import pytest
from archives import tar_members, tar_repack
from graphs import python_artifact, with_arch

from kernelpro_backend.cache import (
    BundleError,
    KernelCache,
    decode_entry,
    encode_entry,
    export_bundle,
    import_bundle,
    read_bundle,
)
from kernelpro_backend.cache.signing import (
    MIN_KEY_BYTES,
    SigningKeyError,
    check,
    key_id,
    load_key,
    sign,
)
from kernelpro_backend.options import Options
from kernelpro_backend.tuner.finder import KernelFinder


def _key_file(tmp_path, name="key", content=None, mode=0o600):
    path = tmp_path / name
    path.write_bytes(content if content is not None else hashlib.sha256(name.encode()).digest())
    path.chmod(mode)
    return path


@pytest.fixture
def key(tmp_path):
    return load_key(_key_file(tmp_path))


@pytest.fixture
def other_key(tmp_path):
    return load_key(_key_file(tmp_path, "other"))


@pytest.fixture
def src(tmp_path, tanh_sg, linear_sg):
    """A cache with two sm_90 entries."""
    with KernelCache(tmp_path / "src") as cache:
        for i, sg in enumerate((tanh_sg, linear_sg)):
            artifact = dataclasses.replace(python_artifact(i), pattern=sg.pattern)
            cache.put(with_arch(cache.key_for(sg.key), "sm_90"), artifact)
        yield cache


def _tamper_with_fixed_manifest(path):
    """Re-encode one entry with a better time claimed (its own checksum right) and recompute its
    sha256 in the manifest, as a forger would: every check but the signature's passes."""
    files = tar_members(path)
    name = sorted(n for n in files if n.startswith("entries/"))[0]
    entry = decode_entry(files[name])
    files[name] = encode_entry(entry.key, dataclasses.replace(entry.artifact, kernel_ms=1e-6))
    manifest = json.loads(files["manifest.json"])
    for item in manifest["entries"]:
        if item["file"] == name:
            item["sha256"] = hashlib.sha256(files[name]).hexdigest()
    files["manifest.json"] = json.dumps(manifest, indent=1, sort_keys=True).encode()
    tar_repack(path, files)


def test_a_signed_export_verifies_with_its_key(tmp_path, src, key):
    out = tmp_path / "b.tar"
    assert len(export_bundle(src, out, key=key)) == 2
    bundle = read_bundle(out)
    assert bundle.signature is not None and bundle.refused == []
    assert bundle.signature == sign(tar_members(out)["manifest.json"], key)
    assert bundle.signature["key_id"] == key_id(key.secret) == key.key_id
    status = check(bundle, [key])
    assert status.verified and str(status) == f"verified (key id {key.key_id})"
    with KernelCache(tmp_path / "dst") as dst:
        report = import_bundle(dst, out, arch="sm_90", keys=[key], require_signature=True)
        assert report.signature.verified and len(report.imported) == 2 and report.refused == []


def test_a_modified_signed_bundle_has_a_bad_signature_and_is_refused(tmp_path, src, key):
    out = tmp_path / "b.tar"
    export_bundle(src, out, key=key)
    _tamper_with_fixed_manifest(out)
    bundle = read_bundle(out)
    assert len(bundle.entries) == 2 and bundle.refused == []  # only the signature catches it
    assert 1e-6 in {e.artifact.kernel_ms for e in bundle.entries}
    status = check(bundle, [key])
    assert status.state == "bad signature" and key.key_id in str(status)
    with KernelCache(tmp_path / "dst") as dst:
        # Refused whether a signature is required or not: it was modified after signing.
        with pytest.raises(BundleError, match="bad signature"):
            import_bundle(dst, out, arch="sm_90", keys=[key])
        assert list(dst.entries()) == []


def test_unsigned_and_unknown_key_bundles_are_refused_only_when_required(
    tmp_path, src, key, other_key
):
    unsigned, foreign = tmp_path / "u.tar", tmp_path / "f.tar"
    export_bundle(src, unsigned)
    export_bundle(src, foreign, key=other_key)
    assert read_bundle(unsigned).signature is None
    assert str(check(read_bundle(unsigned), [key])) == "unsigned"
    status = check(read_bundle(foreign), [key])
    assert status.state == "unknown key" and f"unknown key id {other_key.key_id}" in str(status)
    for path, reason in ((unsigned, "unsigned"), (foreign, "unknown key id")):
        with KernelCache(tmp_path / f"dst-{path.stem}") as dst:
            with pytest.raises(BundleError, match=f"{reason}.*verified signature is required"):
                import_bundle(dst, path, arch="sm_90", keys=[key], require_signature=True)
            assert list(dst.entries()) == []
            report = import_bundle(dst, path, arch="sm_90", keys=[key])
            assert len(report.imported) == 2 and not report.signature.verified


def test_key_files_are_checked(tmp_path):
    with pytest.raises(SigningKeyError, match=f"holds 31 bytes.*at least {MIN_KEY_BYTES}"):
        load_key(_key_file(tmp_path, "short", b"k" * 31))
    with pytest.raises(SigningKeyError, match="cannot read key file"):
        load_key(tmp_path / "absent")
    with pytest.raises(SigningKeyError, match="not a regular file"):
        load_key(tmp_path)
    with pytest.raises(SigningKeyError, match="over 65536 bytes"):
        load_key(_key_file(tmp_path, "huge", b"k" * 70_000))
    with pytest.warns(UserWarning, match="readable by group or others.*chmod 600"):
        loose = load_key(_key_file(tmp_path, "loose", mode=0o644))
    assert len(loose.secret) == 32 and loose.secret.hex() not in repr(loose)


def _with_signature(tmp_path, src, signature: bytes):
    out = tmp_path / "b.tar"
    export_bundle(src, out)
    files = tar_members(out)
    files["signature.json"] = signature
    tar_repack(out, files)
    return out


def _valid(**change):
    fields = {"format": "kernelpro-signature", "alg": "hmac-sha256", "key_id": "0" * 16,
              "mac": "0" * 64} | change  # fmt: skip
    return json.dumps(fields).encode()


@pytest.mark.parametrize(
    "signature, reason",
    [
        (b"{not json", "unparsable"),
        (b"[" * 2000 + b"]" * 2000, "nested too deeply"),
        (b"[" * 100_000 + b"]" * 100_000, "over 4096"),
        (b'["a", "list"]', "exactly the fields"),
        (_valid(extra="x"), "exactly the fields"),
        (_valid(alg="hmac-md5"), "checks only 'hmac-sha256'"),
        (_valid(format="other"), "expected 'kernelpro-signature'"),
        (_valid(mac="Z" * 64), "mac 'ZZZ"),
        (_valid(key_id={"nested": ["deep"]}), "key_id"),
    ],
)
def test_a_malformed_signature_refuses_the_bundle_with_a_reason(tmp_path, src, signature, reason):
    out = _with_signature(tmp_path, src, signature)
    with pytest.raises(BundleError, match=f"malformed signature.json: .*{reason}"):
        read_bundle(out)


# -- extra cache directories -----------------------------------------------------------------
@pytest.fixture
def extra(tmp_path, src, key, other_key):
    """An extra directory with one bundle of each kind: verified, unsigned, unknown key, bad."""
    d = tmp_path / "extra"
    d.mkdir()
    export_bundle(src, d / "1-verified.tar", key=key)
    export_bundle(src, d / "2-unsigned.tar")
    export_bundle(src, d / "3-unknown.tar", key=other_key)
    export_bundle(src, d / "4-bad.tar", key=key)
    _tamper_with_fixed_manifest(d / "4-bad.tar")
    return d


def _sources(tmp_path, src, extra_dir, caplog, **signing):
    """Which bundle each of src's keys is read from, and the warnings logged."""
    caplog.clear()
    with (
        caplog.at_level(logging.WARNING, logger="kernelpro.cache"),
        KernelCache(tmp_path / "kp", extra_dirs=[extra_dir], **signing) as cache,
    ):
        hits = [cache.lookup(e.key) for e in src.entries()]
    found = {hit.source if hit else None for hit in hits}
    return found, [r.getMessage() for r in caplog.records]


def test_extra_dirs_always_skip_a_bad_signature(tmp_path, src, extra, key, caplog):
    (extra / "1-verified.tar").unlink()
    (extra / "2-unsigned.tar").unlink()
    (extra / "3-unknown.tar").unlink()
    found, warned = _sources(tmp_path, src, extra, caplog, trusted_keys=[key])
    assert found == {None}
    assert len(warned) == 1 and "4-bad.tar" in warned[0] and "bad signature" in warned[0]


def test_extra_dirs_read_unsigned_and_unknown_key_bundles_unless_required(
    tmp_path, src, extra, key, caplog
):
    (extra / "1-verified.tar").unlink()
    found, warned = _sources(tmp_path, src, extra, caplog, trusted_keys=[key])
    assert found == {str(extra / "2-unsigned.tar")}
    assert len(warned) == 1 and "bad signature" in warned[0]
    (extra / "2-unsigned.tar").unlink()
    found, _ = _sources(tmp_path, src, extra, caplog, trusted_keys=[key])
    assert found == {str(extra / "3-unknown.tar")}


def test_extra_dirs_honour_require_signed(tmp_path, src, extra, key, caplog):
    found, warned = _sources(tmp_path, src, extra, caplog, trusted_keys=[key], require_signed=True)
    assert found == {str(extra / "1-verified.tar")}
    assert len(warned) == 3  # one per skipped bundle
    for name, why in (("2-unsigned", "unsigned"), ("3-unknown", "unknown key id"),
                      ("4-bad", "bad signature")):  # fmt: skip
        (line,) = [w for w in warned if name in w]
        assert why in line
    (extra / "1-verified.tar").unlink()
    found, _ = _sources(tmp_path, src, extra, caplog, trusted_keys=[key], require_signed=True)
    assert found == {None}


def test_the_finder_passes_the_signing_options_to_the_cache(tmp_path, key):
    options = Options(
        cache_dir=str(tmp_path / "kp"),
        trusted_bundle_keys=(key.path,),
        require_signed_bundles=True,
    )
    finder = KernelFinder.from_options(options)
    try:
        assert finder.cache.trusted_keys == (key,) and finder.cache.require_signed
    finally:
        finder.cache.close()
    with pytest.raises(SigningKeyError, match="cannot read key file"):
        KernelFinder.from_options(Options(trusted_bundle_keys=(str(tmp_path / "absent"),)))
