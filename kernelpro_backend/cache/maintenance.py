"""Keeping a cache honest: listing, re-validation and pruning.

Owns: `list_entries` (the entries matching pattern/kind/arch filters, and how many are
corrupt), `find_entries` (by digest prefix), `verify` (re-check every entry with an injected validator, drop failures - corrupt
entries included - and store re-timed artifacts; `Verdict` is what a validator returns,
`Checked` one row of its summary) and `prune` (drop corrupt entries, those of another cache
schema, and optionally those older than N days; entries proved under another toolchain are
kept: the finder re-proves them before use).
Must not: validate kernels by itself; the validator (kernelpro_backend/tuner/verify.py,
which runs the evaluator) is passed in.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Callable

from .artifact import Entry, KernelArtifact
from .store import KernelCache


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What a validator found for one entry: "ok" keeps it (and stores `updated`, a re-timed
    artifact, where given), "failed" drops it, "skipped" keeps it unchecked (another GPU arch)."""

    status: str  # "ok" | "failed" | "skipped"
    reason: str = ""
    measured_ms: float | None = None
    updated: KernelArtifact | None = None

    def __post_init__(self) -> None:
        if self.status not in ("ok", "failed", "skipped"):
            raise ValueError(f"verdict status must be ok, failed or skipped, got {self.status!r}")


class ValidatorUnavailable(RuntimeError):
    """The validator cannot judge any entry here (no worker pool, the reference itself fails):
    `verify` stops and deletes nothing more, instead of dropping every entry."""


# Re-checks one entry: True (or an "ok" Verdict) keeps it. Raising counts as a failure (the
# message is the reason), except ValidatorUnavailable, which stops `verify`.
Validator = Callable[[Entry], bool | Verdict]


@dataclasses.dataclass(frozen=True)
class Dropped:
    digest: str
    pattern: str
    reason: str


@dataclasses.dataclass(frozen=True)
class Checked:
    """One row of `verify`'s summary table."""

    digest: str
    pattern: str
    language: str
    outcome: str  # kept | dropped | would drop | skipped
    reason: str
    stored_ms: float | None
    measured_ms: float | None


@dataclasses.dataclass(frozen=True)
class MaintenanceReport:
    kept: int
    dropped: list[Dropped]
    skipped: int = 0
    checked: list[Checked] = dataclasses.field(default_factory=list)
    dry_run: bool = False


def matches(
    entry: Entry, pattern: str | None = None, kind: str | None = None, arch: str | None = None
) -> bool:
    """Whether `entry` has this pattern, kind and GPU arch (None matches any)."""
    return (
        (not pattern or entry.artifact.pattern == pattern)
        and (not kind or entry.artifact.kind == kind)
        and (not arch or entry.key.arch == arch)
    )


def list_entries(
    cache: KernelCache, pattern: str | None = None, kind: str | None = None, arch: str | None = None
) -> tuple[list[Entry], int]:
    """(the readable entries that match, sorted by pattern then key; how many are corrupt)."""
    found, corrupt = [], 0
    for item in cache.scan():
        if item.entry is None:
            corrupt += 1
        elif matches(item.entry, pattern, kind, arch):
            found.append(item.entry)
    found.sort(key=lambda e: (e.artifact.pattern, e.key.short()))
    return found, corrupt


def find_entries(cache: KernelCache, prefix: str) -> list[Entry]:
    """The entries whose key digest starts with `prefix` (any case)."""
    return [e for e in cache.entries() if e.key.digest.startswith(prefix.lower())]


def _verdict(validator: Validator, entry: Entry) -> Verdict:
    try:
        found = validator(entry)
    except ValidatorUnavailable:
        raise
    except Exception as e:
        return Verdict("failed", f"validator raised {type(e).__name__}: {e}")
    if isinstance(found, Verdict):
        return found
    return Verdict("ok") if found else Verdict("failed", "failed validation")


def verify(cache: KernelCache, validator: Validator, dry_run: bool = False) -> MaintenanceReport:
    """Re-validate every entry of the writable store; drop the ones that fail (corrupt ones
    included), store re-timed artifacts the validator returns. `dry_run` changes nothing."""
    kept, skipped, dropped, checked = 0, 0, [], []
    for item in cache.scan():
        entry = item.entry
        if entry is None:
            verdict = Verdict("failed", f"corrupt: {item.problem}")
        else:
            verdict = _verdict(validator, entry)
        pattern = entry.artifact.pattern if entry else "?"
        language = entry.artifact.language if entry else "?"
        stored_ms = entry.artifact.kernel_ms if entry else None
        if verdict.status == "failed":
            if not dry_run:
                cache.delete(item.digest)
            dropped.append(Dropped(item.digest, pattern, verdict.reason))
            outcome = "would drop" if dry_run else "dropped"
        elif verdict.status == "skipped":
            skipped += 1
            outcome = "skipped"
        else:
            kept += 1
            outcome = "kept"
            if verdict.updated is not None and entry is not None and not dry_run:
                cache.put(entry.key, verdict.updated)
        checked.append(
            Checked(item.digest, pattern, language, outcome, verdict.reason, stored_ms,
                    verdict.measured_ms)
        )  # fmt: skip
    return MaintenanceReport(kept, dropped, skipped, checked, dry_run)


def prune(
    cache: KernelCache,
    older_than_days: float | None = None,
    now: datetime.datetime | None = None,
    dry_run: bool = False,
) -> MaintenanceReport:
    """Drop corrupt entries (another cache schema included) and, with `older_than_days` (a
    finite number of days above zero), entries that came into this cache before that many
    days ago: an imported entry ages from its import (`Provenance.since`), not from its
    bundle's creation; one imported before kernelpro recorded imports has only its creation
    time and ages from that. `dry_run` reports what would be dropped and changes nothing."""
    if older_than_days is not None and not (0 < older_than_days < math.inf):
        raise ValueError(
            f"--older-than must be a number of days above 0, got {older_than_days}; to drop "
            "every entry, delete the cache directory"
        )
    now = now or datetime.datetime.now(datetime.timezone.utc)
    kept, dropped = 0, []
    for item in cache.scan():
        entry = item.entry
        reason = None
        if entry is None:
            reason = f"corrupt: {item.problem}"
        elif older_than_days is not None:
            age = now - _parse_time(entry.artifact.provenance.since())
            if age > datetime.timedelta(days=older_than_days):
                reason = f"{age.days} days old"
        if reason is None:
            kept += 1
            continue
        if not dry_run:
            cache.delete(item.digest)
        dropped.append(Dropped(item.digest, entry.artifact.pattern if entry else "?", reason))
    return MaintenanceReport(kept, dropped, dry_run=dry_run)


def _parse_time(text: str) -> datetime.datetime:
    try:
        t = datetime.datetime.fromisoformat(text)
    except ValueError:
        return datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)  # unknown: oldest
    return t if t.tzinfo else t.replace(tzinfo=datetime.timezone.utc)
