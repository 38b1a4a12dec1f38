"""Bundles: cache entries packed in one archive to ship kernels to other machines.

Owns: the bundle format (a tar, tar.gz or zip archive with `manifest.json` — format, schema,
created, built_by (who made it: a claim, shown, never trusted), arch, per entry its file,
digest, key JSON and sha256, and `graph_verdicts`: the torch-level rewrites a warm-up measured
slower on a whole graph, by graph fingerprint — plus one JSON entry file per kernel, binary
fields base64, and optionally `signature.json`, whose format signing.py owns), writing it
atomically, and reading it with every check: each entry's sha256 against the manifest, its own
checksum, its key against the manifest's, a well-formed signature if there is one, no file the
manifest does not list, and graph verdicts that can only turn a rewrite off.
Reading is bounded (limits.py): archive.py reads the members within the member, byte and time
limits; the manifest is refused over MAX_MANIFEST_BYTES or nested past MAX_JSON_DEPTH before it
is parsed; an entry is checked the same way by artifact.decode_entry.
Must not: extract archives to disk (members are read into memory by name), unpickle anything,
or touch a cache store (transfer.py exports to and imports from one).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import tarfile
import zipfile
from pathlib import Path
from typing import Any

from ..paths import atomic_write
from .archive import ArchiveError, read_members
from .artifact import CorruptEntry, Entry, decode_entry
from .context import ContextVerdicts
from .limits import MAX_MANIFEST_BYTES, LimitExceeded, loads_bounded
from .signing import SIGNATURE, parse_signature
from .toolchain import CACHE_SCHEMA_VERSION, CacheKey

BUNDLE_FORMAT = "kernelpro-bundle"
MANIFEST = "manifest.json"


GRAPH_VERDICTS = "graph_verdicts"
MAX_GRAPH_VERDICTS = 1_000  # a model has a handful of graphs
# The options a graph verdict may carry: rewrites turned off, nothing else (a bundle cannot
# turn anything on, or change any other option of the importing machine).
VERDICT_OPTIONS = ContextVerdicts.GRAPH_OPTIONS


@dataclasses.dataclass(frozen=True)
class GraphVerdict:
    """Rewrites a warm-up measured slower on the graph `fingerprint` (backend.graph_fingerprint),
    as {option: False}, with who measured it (`model`) and its figures (`why`)."""

    fingerprint: str
    options: dict[str, bool]
    model: str = ""
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def read_graph_verdicts(manifest: dict[str, Any]) -> tuple[list[GraphVerdict], list[Refusal]]:
    """The manifest's graph verdicts that are well formed (a 32-hex fingerprint and only
    VERDICT_OPTIONS set to False; texts cut short), and a refusal for each of the others."""
    listed = manifest.get(GRAPH_VERDICTS, [])
    if not isinstance(listed, list):
        return [], [Refusal(GRAPH_VERDICTS, "not a list")]
    if len(listed) > MAX_GRAPH_VERDICTS:
        return [], [Refusal(GRAPH_VERDICTS, f"more than {MAX_GRAPH_VERDICTS}; not ours")]
    verdicts, refused = [], []
    for item in listed:
        fingerprint = item.get("fingerprint") if isinstance(item, dict) else None
        options = item.get("options") if isinstance(item, dict) else None
        name = f"graph {str(fingerprint)[:32]}"
        if not isinstance(fingerprint, str) or not _is_hex(fingerprint, 32):
            refused.append(Refusal(name, "malformed graph fingerprint"))
        elif (
            not isinstance(options, dict)
            or not options
            or any(k not in VERDICT_OPTIONS or v is not False for k, v in options.items())
        ):
            refused.append(
                Refusal(name, f"a graph verdict may only turn off {', '.join(VERDICT_OPTIONS)}")
            )
        else:
            model, why = item.get("model", ""), item.get("why", "")
            verdicts.append(
                GraphVerdict(fingerprint, dict(options), str(model)[:200], str(why)[:500])
            )
    return verdicts, refused


def _is_hex(text: str, length: int) -> bool:
    return len(text) == length and all(c in "0123456789abcdef" for c in text)


class BundleError(ValueError):
    """The bundle as a whole cannot be read (not an archive, no or bad manifest)."""


@dataclasses.dataclass(frozen=True)
class Refusal:
    """An entry that was not accepted, and why."""

    name: str  # entry file name, with pattern when known
    reason: str

    def __str__(self) -> str:
        return f"{self.name}: {self.reason}"


@dataclasses.dataclass(frozen=True)
class Bundle:
    manifest: dict[str, Any]
    entries: list[Entry]
    refused: list[Refusal]
    # The exact bytes of manifest.json (what a signature covers) and the parsed signature.json,
    # None when the bundle is unsigned (signing.check says whether it verifies).
    manifest_bytes: bytes = b""
    signature: dict[str, str] | None = None


def read_bundle(path: str | os.PathLike[str]) -> Bundle:
    """Read and verify a bundle; entries that fail a check are in `refused`, never in `entries`."""
    try:
        files = read_members(Path(path))
    except ArchiveError as e:
        raise BundleError(f"{path}: {e}") from None
    if MANIFEST not in files:
        raise BundleError(f"{path}: no {MANIFEST}; not a kernelpro bundle")
    manifest_bytes = files.pop(MANIFEST)
    signature = _read_signature(path, files.pop(SIGNATURE, None))
    try:
        manifest = loads_bounded(manifest_bytes, MANIFEST, MAX_MANIFEST_BYTES)
    except LimitExceeded as e:
        raise BundleError(f"{path}: {e}") from None
    except ValueError as e:
        raise BundleError(f"{path}: unparsable {MANIFEST} ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"{path}: {MANIFEST} is not a {BUNDLE_FORMAT} manifest")
    if manifest.get("schema") != CACHE_SCHEMA_VERSION:
        raise BundleError(
            f"{path}: bundle schema {manifest.get('schema')!r}, this kernelpro reads "
            f"{CACHE_SCHEMA_VERSION}; export it again with this version"
        )
    listed = manifest.get("entries")
    if not isinstance(listed, list):
        raise BundleError(f"{path}: {MANIFEST} has no entry list")
    entries: list[Entry] = []
    refused: list[Refusal] = []
    seen: set[str] = set()
    digests: set[str] = set()
    for item in listed:
        entry, problem, label = _check_listed(item, files)
        if isinstance(item, dict) and isinstance(item.get("file"), str):
            if item["file"] in seen and entry is not None:
                entry, problem = None, f"listed twice in {MANIFEST}"
            seen.add(item["file"])
        if entry is not None and entry.key.digest in digests:
            problem = f"a second entry for key {entry.key.short()}"
            entry = None
        if entry is None:
            refused.append(Refusal(label, problem or "unknown problem"))
        else:
            digests.add(entry.key.digest)
            entries.append(entry)
    for name in sorted(set(files) - seen):
        refused.append(Refusal(name, f"not listed in {MANIFEST} (added after export?)"))
    return Bundle(manifest, entries, refused, manifest_bytes, signature)


def _read_signature(path: str | os.PathLike[str], data: bytes | None) -> dict[str, str] | None:
    if data is None:
        return None
    try:
        return parse_signature(data)
    except ValueError as e:
        raise BundleError(f"{path}: malformed {SIGNATURE}: {e}") from None


def _check_listed(item: Any, files: dict[str, bytes]) -> tuple[Entry | None, str | None, str]:
    if not isinstance(item, dict) or not isinstance(item.get("file"), str):
        return None, f"malformed {MANIFEST} entry {item!r:.80}", "?"
    name = item["file"]
    label = f"{name} ({item.get('pattern') or 'unnamed'})"
    data = files.get(name)
    if data is None:
        return None, f"listed in {MANIFEST} but missing from the archive", label
    actual = hashlib.sha256(data).hexdigest()
    if item.get("sha256") != actual:
        return (
            None,
            f"sha256 mismatch: manifest says {item.get('sha256')!r}, file hashes to {actual} "
            "(the entry or the manifest was modified)",
            label,
        )
    try:
        entry = decode_entry(data)
        listed_key = CacheKey.from_dict(item.get("key"))
    except CorruptEntry as e:
        return None, str(e), label
    except (KeyError, TypeError, ValueError) as e:
        return None, f"malformed key in {MANIFEST} ({e})", label
    if listed_key != entry.key or item.get("digest") != entry.key.digest:
        return None, f"{MANIFEST} key differs from the entry's own key", label
    return entry, None, label


def write_archive(out: Path, files: dict[str, bytes]) -> None:
    """Pack `files` (.zip for zip, .tar.gz/.tgz for gzip'd tar, else tar) in memory and write
    the archive atomically: readers never see half a bundle. Entries are a few KB each."""
    raw = io.BytesIO()
    if out.name.endswith(".zip"):
        with zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, data in files.items():
                zf.writestr(name, data)
    else:
        gz = out.name.endswith((".tar.gz", ".tgz"))
        with tarfile.open(fileobj=raw, mode="w:gz" if gz else "w") as tf:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mode = 0o644
                tf.addfile(info, io.BytesIO(data))
    atomic_write(out, raw.getvalue())
