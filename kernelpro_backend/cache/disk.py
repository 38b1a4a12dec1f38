"""A diskcache `Disk` that stores only str keys and bytes values, never unpickles, and never
touches a file outside its directory.

Owns: the guarantee that nothing read from a cache directory goes through pickle. diskcache
pickles any value or key that is not str/bytes/int/float, and unpickles on read whatever a row
says was pickled; a tampered `cache.db` could say so. This Disk refuses both directions. A row
also names the file that holds a large value; diskcache joins that name to its directory, so a
row naming `/etc/passwd` or `../../x` would be read, and deleted by `delete`/`prune`. This Disk
reads and removes only files that lie inside its directory.
Must not: know what the bytes mean (artifact.py decodes them).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import diskcache
from diskcache.core import MODE_PICKLE, UNKNOWN

log = logging.getLogger("kernelpro.cache")


class UnsafeValue(ValueError):
    """A stored row claims to be pickled, or names a file outside the cache directory; it is
    not read."""


class JsonBytesDisk(diskcache.Disk):
    """Keys are str (entry digests), values are bytes (encoded entries)."""

    def put(self, key: Any) -> Any:
        if not isinstance(key, str):
            raise TypeError(f"kernel cache keys are str digests, got {type(key).__name__}")
        return super().put(key)

    def get(self, key: Any, raw: bool) -> Any:
        if not raw:
            raise UnsafeValue("a cache row has a pickled key; refusing to unpickle it")
        return super().get(key, raw)

    def store(self, value: Any, read: bool, key: Any = UNKNOWN) -> Any:
        if read or not isinstance(value, bytes):
            raise TypeError(f"kernel cache values are bytes, got {type(value).__name__}")
        return super().store(value, read, key=key)

    def fetch(self, mode: int, filename: Any, value: Any, read: bool) -> Any:
        if mode == MODE_PICKLE:
            raise UnsafeValue("a cache row holds a pickled value; refusing to unpickle it")
        if filename is not None and not self._inside(filename):
            raise UnsafeValue(f"a cache row names a file outside the cache: {filename!r}")
        return super().fetch(mode, filename, value, read)

    def remove(self, file_path: Any) -> None:
        if not self._inside(file_path):
            log.warning(
                "not deleting %r, which a cache row names but which lies outside %s",
                file_path,
                self._directory,
            )
            return
        super().remove(file_path)

    def _inside(self, filename: Any) -> bool:
        """Whether `filename` (as a row names it) resolves to a file inside the directory."""
        if not isinstance(filename, str) or not filename or os.path.isabs(filename):
            return False
        root = os.path.realpath(self._directory)
        full = os.path.realpath(os.path.join(root, filename))
        return full.startswith(root + os.sep)
