"""Keeping a cache honest: re-validation and pruning.

Owns: `verify` (re-check every entry with an injected validator and drop failures, corrupt
entries included) and `prune` (drop entries for other toolchains or cache schemas, corrupt ones,
and optionally those older than N days).
Must not: validate kernels by itself; the validator (runtime/evaluate) is passed in.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable

from .artifact import Entry
from .store import KernelCache

# Re-checks one entry; True keeps it. Raising counts as a failure (the message is the reason).
Validator = Callable[[Entry], bool]


@dataclasses.dataclass(frozen=True)
class Dropped:
    digest: str
    pattern: str
    reason: str


@dataclasses.dataclass(frozen=True)
class MaintenanceReport:
    kept: int
    dropped: list[Dropped]


def verify(cache: KernelCache, validator: Validator) -> MaintenanceReport:
    """Re-validate every entry of the writable store; drop the ones that fail."""
    kept, dropped = 0, []
    for item in cache.scan():
        reason: str | None = None
        if item.entry is None:
            reason = f"corrupt: {item.problem}"
        else:
            try:
                reason = None if validator(item.entry) else "failed validation"
            except Exception as e:
                reason = f"validator raised {type(e).__name__}: {e}"
        if reason is None:
            kept += 1
            continue
        pattern = item.entry.artifact.pattern if item.entry else "?"
        cache.delete(item.digest)
        dropped.append(Dropped(item.digest, pattern, reason))
    return MaintenanceReport(kept, dropped)


def prune(
    cache: KernelCache,
    older_than_days: float | None = None,
    now: datetime.datetime | None = None,
) -> MaintenanceReport:
    """Drop corrupt entries, entries for another toolchain or schema than the cache's, and,
    with `older_than_days`, entries created before that many days ago."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    kept, dropped = 0, []
    for item in cache.scan():
        entry = item.entry
        reason = None
        if entry is None:
            reason = f"corrupt: {item.problem}"
        elif entry.key.toolchain != cache.toolchain:
            reason = f"other toolchain ({entry.key.toolchain})"
        elif older_than_days is not None:
            age = now - _parse_time(entry.artifact.provenance.created)
            if age > datetime.timedelta(days=older_than_days):
                reason = f"{age.days} days old"
        if reason is None:
            kept += 1
            continue
        cache.delete(item.digest)
        dropped.append(Dropped(item.digest, entry.artifact.pattern if entry else "?", reason))
    return MaintenanceReport(kept, dropped)


def _parse_time(text: str) -> datetime.datetime:
    try:
        t = datetime.datetime.fromisoformat(text)
    except ValueError:
        return datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)  # unknown: oldest
    return t if t.tzinfo else t.replace(tzinfo=datetime.timezone.utc)
