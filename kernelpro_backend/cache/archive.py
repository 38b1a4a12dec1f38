"""Reading an archive from outside into memory, within a `ReadBudget`.

Owns: `read_members(path) -> {name: bytes}`: the regular-file members of a tar, tar.gz or zip
archive (the forms `write_archive` makes), read by name, never extracted. Every member of every
kind counts against MAX_MEMBERS as it is met; every byte read (decompressed, tar headers and
skipped data included) against MAX_BUNDLE_BYTES through a `CappedReader`, so a gzip bomb stops
at the cap; a zip's member count is read from its end record before its central directory is
parsed. A member's stated size is not trusted: at most one byte past the room is read.
Must not: know what the members mean (bundle.py does) or write anything.
"""

from __future__ import annotations

import gzip
import os
import struct
import tarfile
import zipfile
from pathlib import Path
from typing import IO, Any

from . import limits
from .limits import CappedReader, LimitExceeded, ReadBudget

_EOCD = b"PK\x05\x06"
_EOCD_SIZE = 22
_ZIP_TAIL = _EOCD_SIZE + 0xFFFF  # the end record and the longest comment


class ArchiveError(ValueError):
    """The archive cannot be read, or reading it broke a limit (the message says which)."""


def read_members(path: Path, budget: ReadBudget | None = None) -> dict[str, bytes]:
    """Regular-file members by name; ArchiveError (naming the limit) when it cannot be read."""
    budget = budget or ReadBudget()
    files: dict[str, bytes] = {}
    try:
        with open(path, "rb") as raw:
            if os.fstat(raw.fileno()).st_size > budget.max_bytes:
                raise LimitExceeded(
                    f"the archive is over {budget.max_bytes} bytes (limit MAX_BUNDLE_BYTES)"
                )
            head = raw.read(4)
            raw.seek(0)
            if head.startswith(b"PK"):
                _read_zip(raw, files, budget)
            elif head.startswith(b"\x1f\x8b"):
                with gzip.GzipFile(fileobj=raw, mode="rb") as inflated:
                    _read_tar(inflated, files, budget)
            else:
                _read_tar(raw, files, budget)
    except LimitExceeded as e:
        raise ArchiveError(str(e)) from None
    except ArchiveError:
        raise
    except Exception as e:  # tarfile, zipfile, gzip, zlib, struct: whatever a broken file raises
        raise ArchiveError(f"cannot read archive ({type(e).__name__}: {e})") from None
    return files


def _read_tar(stream: Any, files: dict[str, bytes], budget: ReadBudget) -> None:
    # Stream mode ("r|"): members are met in order and nothing is listed or sought first.
    capped: Any = CappedReader(stream, budget)
    with tarfile.open(fileobj=capped, mode="r|") as tf:
        for member in tf:
            budget.member(member.name)
            if member.isfile():
                _take(files, member.name, member.size, budget, lambda m=member: tf.extractfile(m))
            tf.members = []  # type: ignore[attr-defined]  # a stream has no index to keep: memory stays flat per member


def _read_zip(raw: IO[bytes], files: dict[str, bytes], budget: ReadBudget) -> None:
    count, directory_size = _zip_end(raw)
    if count > budget.max_members:
        raise LimitExceeded(
            f"the zip lists {count} members, more than {budget.max_members} (limit MAX_MEMBERS, "
            "every kind counted)"
        )
    budget.charge(directory_size)
    with zipfile.ZipFile(raw) as zf:
        for info in zf.infolist():
            budget.member(info.filename)
            if not info.is_dir():
                _take(files, info.filename, info.file_size, budget, lambda i=info: zf.open(i))


def _zip_end(raw: IO[bytes]) -> tuple[int, int]:
    """(members, central directory bytes) from the zip's end record, read before zipfile
    parses its central directory; a zip64 archive (over 65,535 members) is not ours."""
    size = raw.seek(0, os.SEEK_END)
    start = max(0, size - _ZIP_TAIL)
    raw.seek(start)
    tail = raw.read(size - start)
    raw.seek(0)
    at = tail.rfind(_EOCD)
    if at < 0 or len(tail) - at < _EOCD_SIZE:
        raise zipfile.BadZipFile("no end of central directory record")
    _sig, _disk, _first, _here, total, dir_size, _offset, _comment = struct.unpack(
        "<4s4H2LH", tail[at : at + _EOCD_SIZE]
    )
    if total == 0xFFFF or dir_size == 0xFFFFFFFF:
        raise LimitExceeded("a zip64 archive: more members than a kernelpro bundle holds")
    return total, dir_size


def _take(files: dict[str, bytes], name: str, size: int, budget: ReadBudget, opener: Any) -> None:
    if name in files:
        raise ArchiveError(f"member {name!r:.80} appears twice")
    cap = limits.MAX_MEMBER_BYTES
    if size > cap:
        raise LimitExceeded(
            f"member {name!r:.80} is {size} bytes, over {cap} (limit MAX_MEMBER_BYTES)"
        )
    f = opener()
    if f is None:
        return
    with f:
        data = f.read(min(cap, budget.room) + 1)
    if len(data) > cap:
        raise LimitExceeded(f"member {name!r:.80} is over {cap} bytes (limit MAX_MEMBER_BYTES)")
    if not isinstance(f, tarfile.ExFileObject):
        budget.charge(len(data))  # tar bytes were charged as the stream handed them out
    else:
        budget.tick()
    files[name] = data
