"""A diskcache `Disk` that stores only str keys and bytes values and never unpickles.

Owns: the guarantee that nothing read from a cache directory goes through pickle. diskcache
pickles any value or key that is not str/bytes/int/float, and unpickles on read whatever a row
says was pickled; a tampered `cache.db` could say so. This Disk refuses both directions.
Must not: know what the bytes mean (artifact.py decodes them).
"""

from __future__ import annotations

from typing import Any

import diskcache
from diskcache.core import MODE_PICKLE, UNKNOWN


class UnsafeValue(ValueError):
    """A stored row claims to be pickled; kernelpro never unpickles, so it is not read."""


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
        return super().fetch(mode, filename, value, read)
