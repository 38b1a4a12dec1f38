"""What this kernelpro built into the cubin cache, known by content: cubins and host libraries.

Owns: `store_built(path, data)`: `data`, built now for the cache name `path`
(compile.compiled_path), is written under a name of its own sha256 beside it, in a
directory private to this user (paths.private_dir), then the record `<path>.sha256` that names
the digest; this process remembers the digest too. `read_built(path)`: the file and bytes the
digest recorded when this process, or this kernelpro in the record it wrote in a directory only
this user can write, built them — or None (nothing built yet, or refused with a log line: a
directory others could write to, no record, bytes that do not hash to it). A file put in the
cache by anyone else (a shared library whose constructors `ctypes.CDLL` would run, a cubin of
other code) is never returned: the caller builds again.
Content-named files never change once written: a library is loaded from exactly the bytes
checked, and processes building one source at once each leave a record naming a file that
matches it.
Must not: compile, load, or choose where the cache lives (compile.py and paths.py do).
"""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path

from ...paths import atomic_write, private_dir, unsafe_reason

log = logging.getLogger("kernelpro")

RECORD_SUFFIX = ".sha256"
_DIGEST = re.compile(r"[0-9a-f]{64}")
_BUILT: dict[Path, str] = {}  # cache name -> the digest of what this process built there
_WARNED: set[Path] = set()  # cache names whose refusal was logged (a build may be polled)


def record_path(path: Path) -> Path:
    return path.with_name(path.name + RECORD_SUFFIX)


def content_path(path: Path, digest: str) -> Path:
    """Where the built file whose sha256 is `digest` lives, for the cache name `path`."""
    return path.with_name(f"{path.stem}-{digest[:16]}{path.suffix}")


def store_built(path: Path, data: bytes) -> Path:
    """Write `data`, built now for `path`, and its record; returns the file that holds it.
    Raises OSError (paths.UnsafeDirectory where another user could write to the directory)."""
    private_dir(path.parent)
    digest = hashlib.sha256(data).hexdigest()
    target = content_path(path, digest)
    atomic_write(target, data, mode=0o600)
    atomic_write(record_path(path), digest + "\n", mode=0o600)
    _BUILT[path] = digest
    _WARNED.discard(path)
    return target


def read_built(path: Path) -> tuple[Path, bytes] | None:
    """(the built file, its bytes) for the cache name `path`, if this kernelpro built them;
    else None, a refusal logged once per name."""
    if not path.parent.exists():
        return None  # nothing was built under this root yet
    problem = unsafe_reason(path.parent) or unsafe_reason(path.parent.parent)
    if problem:
        _refuse(path, f"its directory is not private to this user: {problem}")
        return None
    digest = _BUILT.get(path) or _recorded(path)
    if digest is None:
        if path.exists():  # an older kernelpro's file, or one put there
            _refuse(path, "this kernelpro has no record of building it")
        return None
    target = content_path(path, digest)
    try:
        data = target.read_bytes()
    except FileNotFoundError:
        return None
    if hashlib.sha256(data).hexdigest() != digest:
        _refuse(target, "its bytes do not hash to the digest recorded when it was built")
        return None
    return target, data


def _recorded(path: Path) -> str | None:
    """The digest in `path`'s record, or None without a well-formed one."""
    try:
        with open(record_path(path), "rb") as f:
            text = f.read(80).decode("ascii", "replace").strip()
    except OSError:
        return None
    return text if _DIGEST.fullmatch(text) else None


def _refuse(path: Path, why: str) -> None:
    if path not in _WARNED:
        _WARNED.add(path)
        log.warning("not loading %s: %s; building it again", path, why)
    return None
