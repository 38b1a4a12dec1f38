"""`kernelpro cache ls` and `kernelpro cache show`: what a cache holds, as tables or JSON.

Owns: their printouts, and `table` (format_table with every cell made printable: patterns,
names, reasons and claims come from caches and bundles made elsewhere).
Must not: change the cache.

`kernelpro cache ls --json` prints one object (keys stable; new keys may be added):
    directory   the cache directory
    entries     one object per entry: key (the digest), pattern, kind, arch, language,
                kernel_ms, speedup, sol_fraction (numbers or null), proved_here (bool), created
                (ISO 8601: when it was made), imported (ISO 8601 or null: when `cache import`
                brought it here), in_context ("used", "slower" or "held": the warm-up's verdict)
    corrupt     how many entries could not be read
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import Any, TextIO

from ..cache.artifact import Entry
from ..cache.maintenance import find_entries, list_entries
from ..cache.printable import printable
from ..cache.store import KernelCache
from ..text_table import format_table


def table(headers: tuple[str, ...], rows: Sequence[Sequence[object]]) -> str:
    """format_table with every cell made printable (no escape sequence reaches a terminal)."""
    return format_table(headers, [tuple(printable(c) if isinstance(c, str) else c for c in r)
                                  for r in rows])  # fmt: skip


def _verdict(cache: KernelCache, digest: str) -> str:
    if cache.context.rejected(digest) is not None:
        return "slower"
    return "held" if cache.context.held(digest, say=False) is not None else "used"


def _as_json(cache: KernelCache, e: Entry) -> dict[str, Any]:
    a = e.artifact
    return {
        "key": e.key.digest, "pattern": a.pattern, "kind": a.kind, "arch": e.key.arch,
        "language": a.shown_language, "kernel_ms": a.kernel_ms, "speedup": a.speedup,
        "sol_fraction": a.sol_fraction, "proved_here": not cache.unproved(e),
        "created": a.provenance.created, "imported": a.provenance.imported or None,
        "in_context": _verdict(cache, e.key.digest),
    }  # fmt: skip


def ls(cache: KernelCache, args: argparse.Namespace, out: TextIO) -> int:
    entries, corrupt = list_entries(cache, args.pattern, args.kind, args.arch)
    if args.json:
        found = [_as_json(cache, e) for e in entries]
        listing = {"directory": str(cache.directory), "entries": found, "corrupt": corrupt}
        print(json.dumps(listing, indent=1), file=out)
        return 0
    rows = [
        (e.key.short(), e.artifact.pattern, e.artifact.kind, e.key.arch, e.artifact.shown_language,
         e.artifact.kernel_ms, e.artifact.speedup, e.artifact.sol_fraction,
         "no" if cache.unproved(e) else "yes", e.artifact.provenance.created[:10])
        for e in entries
    ]  # fmt: skip
    headers = ("KEY", "PATTERN", "KIND", "ARCH", "LANG", "MS", "SPEEDUP", "SOL", "PROVED", "DATE")
    print(table(headers, rows), file=out)
    print(f"{len(rows)} entries in {cache.directory}", file=out)
    if any(r[8] == "no" for r in rows):
        print("PROVED no: made on another toolchain or GPU model, or imported; re-proved and "
              "re-timed on this GPU before its first use", file=out)  # fmt: skip
    lost = sum(cache.context.rejected(e.key.digest) is not None for e in entries)
    if lost:
        print(f"{lost} of them made their model's step slower at warm-up and stay unused "
              "(`kernelpro cache show KEY` says by how much)", file=out)  # fmt: skip
    held = sum(cache.context.held(e.key.digest, say=False) is not None for e in entries)
    if held:
        print(f"{held} of them were found by a warm-up whose in-context check has not judged "
              "them and stay unused until `kernelpro warmup` finishes it", file=out)  # fmt: skip
    if corrupt:
        print(f"{corrupt} corrupt entries (skipped; `kernelpro cache prune` drops them)", file=out)
    return 0


def _context(cache: KernelCache, digest: str) -> str:
    """What the warm-up's in-context check said of an entry (cache/context.py)."""
    record = cache.context.rejected(digest)
    if record is not None:
        return f"unused: slower in {record.get('model', 'its model')} ({record.get('why', '')})"
    held = cache.context.held(digest, say=False)
    if held is not None:
        return (
            f"unused: held since a warm-up of {held.get('model', 'a model')} found it, until "
            "that warm-up's in-context check judges it"
        )
    return "used (not found slower in a warm-up's step)"


def show(cache: KernelCache, prefix: str, out: TextIO) -> int:
    found = find_entries(cache, prefix)
    if len(found) != 1:
        what = "no entry" if not found else f"{len(found)} entries"
        print(f"{what} matching {printable(repr(prefix))}; `kernelpro cache ls` lists the keys",
              file=out)  # fmt: skip
        return 1
    e = found[0]
    a = e.artifact
    rows = [
        ("digest", e.key.digest), ("pattern", a.pattern), ("kind", a.kind),
        ("ops", " ".join(a.ops)), ("arch", e.key.arch), ("precision", e.key.subgraph.precision),
        ("inputs", json.dumps(e.key.subgraph.inputs)), ("toolchain", str(a.provenance.toolchain)),
        ("gpu", a.provenance.gpu), ("origin", a.provenance.origin),
        ("proved here", cache.unproved(e) or "yes"),
        ("in its model", _context(cache, e.key.digest)),
        ("language", a.language), ("entry", a.entry), ("launch", json.dumps(a.launch)),
        ("binary", f"{len(a.binary)} bytes" if a.binary else None), ("kernel_ms", a.kernel_ms),
        ("baselines_ms", json.dumps(a.baselines_ms)), ("speedup", a.speedup),
        ("sol_fraction", a.sol_fraction), ("search_log", _theirs(a.provenance.search_log)),
        ("created", a.provenance.created), ("sha256", e.sha256),
    ]  # fmt: skip
    print(table(("FIELD", "VALUE"), rows), file=out)
    if a.spec_json:
        print(f"\nspec: {printable(a.spec_json)}", file=out)
    print(f"\nsource:\n{printable(a.source, keep_newlines=True)}", file=out)
    return 0


def _theirs(path: str | None) -> str | None:
    """A path an entry names (its search log) as this machine can use it: as is when it exists
    here, else its file name, marked as the maker's (an absolute path of another machine
    says nothing here, and names that machine's directories)."""
    if not path or not os.path.isabs(path) or os.path.exists(path):
        return path
    return f"{os.path.basename(path)} (on the machine that made it)"
