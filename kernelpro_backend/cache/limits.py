"""Bounds on reading data from outside: bundles, their manifests and entries, specs, search logs.

Owns: the limits (bytes, members, JSON nesting depth, seconds) and the checks that apply them
while reading, so a hostile input is refused early and named by the limit it broke:
`json_depth_problem(text, limit)` (a scan of the raw text, before `json.loads` can recurse),
`loads_bounded(data, what, max_bytes)` (size and depth first, then `json.loads`; every failure a
`LimitExceeded` or `ValueError` naming `what`), `ReadBudget` (a running count of members, bytes
and seconds for one archive: each check is O(1), nothing is summed again), `CappedReader` (a
file object that refuses to hand out more than the budget's bytes: a gzip bomb stops at the cap,
not after it was inflated), and `read_text_bounded(path, max_bytes)`.
Must not: know the bundle format (bundle.py does) or read anything it is not handed.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import IO, Any

MAX_JSON_DEPTH = 32  # our deepest document, a KernelSpec, nests 7 levels
MAX_MEMBERS = 10_000  # archive members of every kind; a real bundle holds hundreds
MAX_MEMBER_BYTES = 16 * 2**20  # an entry is a few KB; a cubin (base64) well under 4 MiB
MAX_BUNDLE_BYTES = 64 * 2**20  # all members, headers included, as read (decompressed)
MAX_MANIFEST_BYTES = 16 * 2**20  # 10,000 listed entries at ~600 bytes each, and room
MAX_SPEC_BYTES = 256 * 2**10  # a KernelSpec's JSON is a few KB
MAX_LOG_BYTES = 256 * 2**20  # a search log of thousands of trials is tens of MB
MAX_READ_S = 30.0  # one archive, read from a local disk: well under a second when honest

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


class LimitExceeded(ValueError):
    """Outside data broke one of the limits above; the message names the limit."""


def json_depth_problem(text: str, limit: int = MAX_JSON_DEPTH) -> str | None:
    """Why `text` nests deeper than `limit` (brackets outside strings), or None. Linear in
    the text; stops at the first bracket past the limit."""
    depth = 0
    for m in _BRACKET.finditer(_STRING.sub('""', text)):
        depth += 1 if m.group() in "[{" else -1
        if depth > limit:
            return f"nested more than {limit} deep (limit MAX_JSON_DEPTH)"
    return None


def loads_bounded(data: bytes | str, what: str, max_bytes: int, depth: int = MAX_JSON_DEPTH) -> Any:
    """`json.loads(data)` for data from outside: refused (LimitExceeded, naming `what` and the
    limit) when over `max_bytes` or nested deeper than `depth`; ValueError when not JSON."""
    if len(data) > max_bytes:
        raise LimitExceeded(f"{what} is {len(data)} bytes, over the limit of {max_bytes}")
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as e:
        raise ValueError(f"{what} is not UTF-8 ({e.reason} at byte {e.start})") from None
    problem = json_depth_problem(text, depth)
    if problem:
        raise LimitExceeded(f"{what} is {problem}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{what}: not JSON ({e})") from None
    except RecursionError:  # not reachable after the depth scan; kept as the last guard
        raise LimitExceeded(f"{what} nests too deeply to parse") from None


class ReadBudget:
    """What one archive may cost to read: members of any kind, bytes read (decompressed,
    headers and skipped data included) and seconds. Every charge is checked at once."""

    def __init__(
        self,
        members: int | None = None,
        total_bytes: int | None = None,
        seconds: float | None = None,
    ) -> None:
        # Read when made (not when defined), so a test may lower a limit for a moment.
        self.max_members = MAX_MEMBERS if members is None else members
        self.max_bytes = MAX_BUNDLE_BYTES if total_bytes is None else total_bytes
        self.seconds = MAX_READ_S if seconds is None else seconds
        self.members = 0
        self.bytes = 0
        self.deadline = time.monotonic() + self.seconds

    def member(self, name: str) -> None:
        self.members += 1
        if self.members > self.max_members:
            raise LimitExceeded(
                f"more than {self.max_members} archive members (limit MAX_MEMBERS, every kind "
                f"counted: files, directories, links, devices; at {name!r:.80})"
            )
        self.tick()

    def charge(self, count: int) -> None:
        self.bytes += count
        if self.bytes > self.max_bytes:
            raise LimitExceeded(
                f"more than {self.max_bytes} bytes once unpacked (limit MAX_BUNDLE_BYTES)"
            )
        self.tick()

    @property
    def room(self) -> int:
        return self.max_bytes - self.bytes

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise LimitExceeded(f"reading it took over {self.seconds:g} s (limit MAX_READ_S)")


class CappedReader:
    """A read-only file object over `raw` that charges every byte it hands out to `budget`:
    a request past the budget's room is refused before anything is read."""

    def __init__(self, raw: IO[bytes], budget: ReadBudget) -> None:
        self.raw, self.budget = raw, budget

    def read(self, size: int = -1) -> bytes:
        want = self.budget.room + 1 if size is None or size < 0 else size
        if want > self.budget.room + 1:
            want = self.budget.room + 1  # one byte past the room proves the cap was crossed
        data = self.raw.read(want)
        self.budget.charge(len(data))
        return data

    def readable(self) -> bool:
        return True


def read_text_bounded(path: str | os.PathLike[str], max_bytes: int, what: str) -> str:
    """The text of `path` (UTF-8, undecodable bytes replaced), refused when over `max_bytes`."""
    with open(path, "rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise LimitExceeded(f"{what} {path} is over {max_bytes} bytes (limit MAX_LOG_BYTES)")
    return data.decode("utf-8", errors="replace")
