"""The kernel cache: a diskcache store of entries plus read-only bundle directories.

Owns: `KernelCache.put/lookup/get/missing/scan/delete`, the checks that make a read trustworthy
(checksum, schema, the entry's own key equal to the key asked for), reading extra directories of
bundles after the writable store (a bundle whose signature signing.refusal rejects is skipped
whole), and saying of each hit whether it was proved on this machine
(`Hit.unproved`: why it must be re-proved before it runs here, tuner.finder does that).
Must not: compile, load or search kernels, or spell a path of the cache directory (paths.py
owns where the cache lives and its layout: kernels/ is the diskcache store, cache.db + value
files, key = CacheKey.digest; misses.jsonl the miss manifest).

Writes are atomic: diskcache commits each entry in one SQLite transaction (a value over the
file threshold is written to a fresh file before the row that names it is committed), so a
reader or a crash sees the whole entry or none of it. It is process-safe, so several warm-up
workers can write into one cache.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import diskcache

from ..fx_passes import SubgraphKey
from ..paths import CACHE_DIR_ENV, CacheLayout
from .artifact import CorruptEntry, Entry, KernelArtifact, decode_entry, encode_entry
from .bundle import BundleError, read_bundle
from .context import ContextVerdicts
from .disk import JsonBytesDisk, UnsafeValue
from .misses import MissManifest
from .printable import printable
from .rows import (
    CacheReadOnly,
    CacheUnavailable,
    ReadOnlyStore,
    check_database,
    delete_rows,
    row_keys,
)
from .signing import SigningKey, check, refusal
from .toolchain import CacheKey, Toolchain, cache_key, current_gpu, current_toolchain

log = logging.getLogger("kernelpro.cache")

# Whether an entry made elsewhere may be loaded here (tuner.admit.admit): None, as it is; the
# artifact to load instead (the same kernel, its code rendered here); or why it is refused.
Admit = Callable[[KernelArtifact], "str | KernelArtifact | None"]


def admitted(admit: Admit | None, artifact: KernelArtifact) -> tuple[KernelArtifact | None, str]:
    """(the artifact to use, "") or (None, why it is refused), by `admit` (None: as it is)."""
    verdict = admit(artifact) if admit is not None else None
    if isinstance(verdict, str):
        return None, verdict
    return (artifact if verdict is None else verdict), ""


BUNDLE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".zip")


@dataclasses.dataclass(frozen=True)
class Hit:
    """An entry found for a key: where it came from, and why it must be re-proved before it
    runs here (None: it was proved and timed in this store, on this toolchain and GPU model)."""

    entry: Entry
    source: str  # the store's directory, or the bundle file it was read from
    unproved: str | None

    @property
    def artifact(self) -> KernelArtifact:
        return self.entry.artifact


@dataclasses.dataclass(frozen=True)
class ScannedEntry:
    """One row of the writable store: a verified entry, or the reason it cannot be trusted."""

    digest: str
    entry: Entry | None
    problem: str | None


class KernelCache:
    """Entries keyed by `CacheKey`; `get` never returns anything that failed a check."""

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        extra_dirs: Sequence[str | os.PathLike[str]] = (),
        toolchain: Toolchain | None = None,
        environ: Mapping[str, str] | None = None,
        admit: Admit | None = None,
        gpu: str | None = None,
        trusted_keys: Sequence[SigningKey] = (),
        require_signed: bool = False,
    ) -> None:
        self.layout = CacheLayout.of(directory, environ)
        self.directory = self.layout.root
        # Entries of the extra directories were made elsewhere: `admit` (tuner.admit) refuses
        # those whose code did not come out of this kernelpro, before any of it runs.
        self.admit = admit
        self.extra_dirs = tuple(Path(d).expanduser() for d in extra_dirs)
        # Their bundles' signatures are checked against these keys: a bad one (modified after
        # signing) is always skipped; with `require_signed`, so is any not verified.
        self.trusted_keys = tuple(trusted_keys)
        self.require_signed = require_signed
        # The machine an entry must have been proved on to be used without a re-proof.
        self.toolchain = toolchain or current_toolchain()
        self.gpu = gpu or current_gpu()
        self.misses = MissManifest(self.layout.misses)
        self.context = ContextVerdicts(self.layout.context)
        self.read_only = False
        self._store: diskcache.Cache | ReadOnlyStore = self._open()
        self._extra: dict[str, tuple[Entry, Path]] | None = None

    def _open(self) -> diskcache.Cache | ReadOnlyStore:
        """The diskcache store; a cache.db that is not SQLite is set aside (one warning) and a
        fresh one made; a store that cannot be written is read read-only (one warning)."""
        kernels = self.layout.kernels
        try:
            problem = check_database(kernels)
        except OSError as e:
            problem = f"{kernels / 'cache.db'} is unreadable and cannot be moved aside: {e}"
        if problem:
            log.warning("%s; starting an empty cache", problem)
        try:
            # No eviction: a kernel costs minutes of search; entries are a few KB to a few
            # hundred.
            return diskcache.Cache(
                str(kernels), disk=JsonBytesDisk, eviction_policy="none", size_limit=2**40,
                timeout=60,
            )  # fmt: skip
        except (OSError, sqlite3.Error) as e:
            error = e
        try:
            store = ReadOnlyStore(kernels)
        except (OSError, sqlite3.Error):
            raise CacheUnavailable(
                f"cannot open the kernel cache in {self.directory} ({type(error).__name__}: "
                f"{error}); set {CACHE_DIR_ENV} or options={{'cache_dir': ...}} to a writable "
                "directory, or options={'search': 'off'} to run without a cache"
            ) from error
        log.warning(
            "cannot write %s (%s: %s); reading its entries read-only, new kernels are not stored",
            self.directory,
            type(error).__name__,
            error,
        )
        self.read_only = True
        return store

    # -- keys -------------------------------------------------------------------------------
    def key_for(self, subgraph_key: SubgraphKey) -> CacheKey:
        return cache_key(subgraph_key)

    # -- writes -----------------------------------------------------------------------------
    def put(self, key: CacheKey, artifact: KernelArtifact) -> None:
        """Store (or replace) the entry for `key`, atomically."""
        self._store.set(key.digest, encode_entry(key, artifact), retry=True)

    def put_raw(self, digest: str, data: bytes) -> None:
        """Store already-encoded entry bytes as they are (for tools and tests; readers check them)."""
        self._store.set(digest, data, retry=True)

    def delete(self, digest: str) -> bool:
        """Remove an entry by digest, or a corrupt row by the "row <rowid>" name scan gives."""
        if digest.startswith("row "):
            if self.read_only:
                raise CacheReadOnly(f"the kernel cache in {self.directory} is read-only")
            delete_rows(self.layout.kernels, [int(digest[4:])])
            return True
        return bool(self._store.delete(digest, retry=True))

    # -- reads ------------------------------------------------------------------------------
    def lookup(self, key: CacheKey) -> Hit | None:
        """The entry for `key` from the store, else from the extra directories, else None.
        Untrustworthy entries are skipped with a log line. An entry of the store proved on
        another toolchain or GPU model, or imported, and every entry of an extra directory,
        comes back with the reason it must be re-proved here."""
        data = self._read(key.digest)
        if data is not None:
            entry = self._trusted(data, key, f"{self.directory} entry {key.short()}")
            if entry is not None:
                return Hit(entry, str(self.directory), self.unproved(entry))
        found = self._extra_entries().get(key.digest)
        if found is not None and found[0].key == key:
            entry, path = found
            return Hit(entry, str(path), f"read from {path}: proved elsewhere")
        return None

    def unproved(self, entry: Entry) -> str | None:
        """Why an entry of the store must be re-proved before it runs here, or None."""
        made = entry.artifact.provenance
        if made.origin == "import":
            return "imported: not proved on this machine yet"
        if made.toolchain != self.toolchain:
            return f"proved with {made.toolchain}, this is {self.toolchain}"
        if made.gpu != self.gpu:
            return f"timed on {made.gpu}, this is {self.gpu}"
        return None

    def get(self, key: CacheKey) -> KernelArtifact | None:
        """The artifact `lookup` finds for `key`, proved here or not, or None."""
        hit = self.lookup(key)
        return None if hit is None else hit.artifact

    def __contains__(self, key: CacheKey) -> bool:
        return self.get(key) is not None

    def missing(self, keys: Iterable[CacheKey]) -> list[CacheKey]:
        """The keys with no usable entry, in the given order: what a resumed warm-up searches."""
        return [k for k in keys if self.get(k) is None]

    def scan(self) -> Iterator[ScannedEntry]:
        """Every row of the writable store, verified (extra directories are not included). A
        row whose key is pickled is reported as corrupt under the name "row <rowid>"."""
        try:
            digests, bad_rows = row_keys(self.layout.kernels, immutable=self.read_only)
        except sqlite3.Error as e:
            log.warning("cannot list %s: %s", self.directory, e)
            return
        for rowid in bad_rows:
            yield ScannedEntry(f"row {rowid}", None, "its key is pickled or not a str digest")
        for digest in digests:
            try:
                data = self._fetch(digest)
            except UnsafeValue as e:
                yield ScannedEntry(digest, None, str(e))
                continue
            if data is None:
                continue  # deleted meanwhile
            try:
                entry = decode_entry(data)
            except CorruptEntry as e:
                yield ScannedEntry(digest, None, str(e))
                continue
            if entry.key.digest != digest:
                yield ScannedEntry(digest, None, "stored under a digest that is not its key's")
                continue
            yield ScannedEntry(digest, entry, None)

    def entries(self) -> Iterator[Entry]:
        """Verified entries of the writable store."""
        for item in self.scan():
            if item.entry is not None:
                yield item.entry

    def raw(self, digest: str) -> bytes | None:
        return self._read(digest)

    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> KernelCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------------
    def _read(self, digest: str) -> bytes | None:
        try:
            return self._fetch(digest)
        except UnsafeValue as e:
            log.warning("skipping entry %s: %s", digest[:12], e)
            return None

    def _fetch(self, digest: str) -> bytes | None:
        value = self._store.get(digest, default=None, retry=True)
        if value is not None and not isinstance(value, bytes):
            raise UnsafeValue(f"its value is {type(value).__name__}, not bytes")
        return value

    def _trusted(self, data: bytes, key: CacheKey, where: str) -> Entry | None:
        try:
            entry = decode_entry(data)
        except CorruptEntry as e:
            log.warning("skipping corrupt %s: %s", where, e)
            return None
        problem = foreign_reason(entry.key, key)
        if problem:
            log.warning("skipping foreign %s: %s", where, problem)
            return None
        return entry

    def _extra_entries(self) -> dict[str, tuple[Entry, Path]]:
        if self._extra is None:
            self._extra = {}
            for bundle_path in _bundle_files(self.extra_dirs):
                # The one boundary between a bundle's bytes and the user's compile: whatever
                # reading, checking or admitting them raises skips the bundle, with one warning
                # naming it and the reason (printable: both come from outside), and the
                # fallback runs for what it would have held.
                try:
                    found = self._read_extra(bundle_path)
                except Exception as e:
                    reason = str(e) if isinstance(e, BundleError) else f"{type(e).__name__}: {e}"
                    log.warning("skipping bundle %s: %s",
                                printable(bundle_path), printable(reason)[:500])  # fmt: skip
                    continue
                for entry in found:
                    self._extra.setdefault(entry.key.digest, (entry, bundle_path))
        return self._extra

    def _read_extra(self, bundle_path: Path) -> list[Entry]:
        """The bundle's entries that are admitted here (a refused one: a warning each)."""
        bundle = read_bundle(bundle_path)
        problem = refusal(check(bundle, self.trusted_keys), self.require_signed)
        if problem:
            raise BundleError(problem)
        found = []
        for entry in bundle.entries:
            artifact, problem = admitted(self.admit, entry.artifact)
            if artifact is None:
                log.warning(
                    "not using %s %s from %s: %s",
                    printable(entry.artifact.pattern or "an entry"),
                    entry.key.short(),
                    printable(bundle_path),
                    printable(problem)[:500],
                )
                continue
            found.append(dataclasses.replace(entry, artifact=artifact))
        return found


def foreign_reason(found: CacheKey, wanted: CacheKey) -> str | None:
    """Why an entry's own key does not match the key it was looked up under, or None."""
    if found == wanted:
        return None
    if found.arch != wanted.arch:
        return f"built for arch {found.arch}, wanted {wanted.arch}"
    if found.schema != wanted.schema:
        return f"cache schema {found.schema}, wanted {wanted.schema}"
    return "its key differs from the one it is stored under"


def _bundle_files(dirs: Sequence[Path]) -> list[Path]:
    found: list[Path] = []
    for d in dirs:
        if d.is_file():
            found.append(d)
        elif d.is_dir():
            found.extend(
                sorted(p for p in d.rglob("*") if p.is_file() and p.name.endswith(BUNDLE_SUFFIXES))
            )
    return found
