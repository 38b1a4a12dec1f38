"""A diskcache directory read with plain SQLite: what a cache falls back to when diskcache
cannot open it, and the rows diskcache itself would choke on.

Owns: `check_database` (a `cache.db` that is empty or not SQLite is set aside, with its reason,
before diskcache silently treats it as an empty cache), `row_keys` (the str keys of a store and
the rowids of rows whose key is pickled, which kernelpro never unpickles), `delete_rows`, and
`ReadOnlyStore`, the part of `diskcache.Cache` that `KernelCache` reads, over a read-only
SQLite connection, for caches in directories this process cannot write.
Must not: decode entries (artifact.py) or unpickle anything (values go through JsonBytesDisk).
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .disk import JsonBytesDisk

DB_NAME = "cache.db"
_SQLITE_HEADER = b"SQLite format 3\x00"
_CREATING_S = 30.0  # a shorter cache.db younger than this may be one being created


class CacheUnavailable(OSError):
    """The cache directory cannot be opened, or (read-only) written."""


class CacheReadOnly(CacheUnavailable):
    """A write to a cache this process can only read."""


def check_database(directory: Path) -> str | None:
    """If `directory`'s cache.db exists but is not a SQLite file (or has stayed empty), move it
    (and its journal files) aside and return why; else None."""
    db = directory / DB_NAME
    try:
        with db.open("rb") as f:
            head = f.read(len(_SQLITE_HEADER))
    except FileNotFoundError:
        return None
    except OSError:
        return None  # unreadable: diskcache's own error says so
    if head == _SQLITE_HEADER:
        return None
    if len(head) < len(_SQLITE_HEADER) and time.time() - db.stat().st_mtime < _CREATING_S:
        return None  # another process is creating it: SQLite writes the header a moment later
    why = "is empty (0 bytes)" if not head else "is not a SQLite database"
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for suffix in ("", "-wal", "-shm"):
        part = directory / (DB_NAME + suffix)
        if part.exists():
            part.rename(directory / f"{DB_NAME}{suffix}.unreadable-{stamp}")
    return f"{db} {why}; moved aside to {DB_NAME}.unreadable-{stamp}"


def _connect(directory: Path, read_only: bool = True, immutable: bool = False) -> Any:
    path = urllib.parse.quote(str(directory / DB_NAME))
    mode = "ro" if read_only else "rw"
    flags = "&immutable=1" if immutable else ""
    return contextlib.closing(sqlite3.connect(f"file:{path}?mode={mode}{flags}", uri=True))


def row_keys(directory: Path, immutable: bool = False) -> tuple[list[str], list[int]]:
    """(the str keys of the store's rows, the rowids of rows whose key is not a plain str)."""
    with _connect(directory, immutable=immutable) as db:
        rows = db.execute("SELECT rowid, key, raw FROM Cache ORDER BY rowid").fetchall()
    keys = [k for _, k, raw in rows if raw and isinstance(k, str)]
    bad = [rowid for rowid, k, raw in rows if not (raw and isinstance(k, str))]
    return keys, bad


def delete_rows(directory: Path, rowids: list[int]) -> None:
    """Remove rows by rowid (those with pickled keys, which no key lookup can name)."""
    with _connect(directory, read_only=False) as db, db:
        db.executemany("DELETE FROM Cache WHERE rowid = ?", [(r,) for r in rowids])


class ReadOnlyStore:
    """`get` and `iterkeys` of a diskcache store that cannot be written; writes raise
    `CacheReadOnly`. Values are fetched through JsonBytesDisk (no pickle, no file outside
    the directory)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._disk = JsonBytesDisk(str(directory))
        # immutable: no -shm/-wal file is created in a directory that cannot take one.
        with _connect(directory, immutable=True) as db:
            db.execute("SELECT count(*) FROM Cache").fetchone()

    def get(self, key: str, default: Any = None, retry: bool = False) -> Any:
        with _connect(self.directory, immutable=True) as db:
            row = db.execute(
                "SELECT mode, filename, value FROM Cache WHERE key = ? AND raw = 1", (key,)
            ).fetchone()
        if row is None:
            return default
        mode, filename, value = row
        return self._disk.fetch(mode, filename, value, False)

    def iterkeys(self) -> Iterator[str]:
        return iter(row_keys(self.directory, immutable=True)[0])

    def set(self, *args: Any, **kwargs: Any) -> bool:
        raise CacheReadOnly(f"the kernel cache in {self.directory} is read-only")

    def delete(self, *args: Any, **kwargs: Any) -> bool:
        raise CacheReadOnly(f"the kernel cache in {self.directory} is read-only")

    def close(self) -> None:
        pass
