"""`kernelpro cache misses`: the subgraphs that ran on the fallback for want of a kernel.

Reads the cache's miss manifest (cache/misses.py) and prints one row per static subgraph that
missed and one per symbolic subgraph (a family) with every dynamic size it missed at, with the
recorded reasons, then what to run to fill them.
Owns: the grouping, the table, and saying why there are none when there are none.
Must not: search or write the cache.

`kernelpro cache misses --json` prints one object (keys stable; new keys may be added):
    manifest    the miss manifest's path (misses.jsonl in the cache directory)
    misses      how many misses were recorded (of --pattern's, when given)
    subgraphs   one object per static subgraph and per family of a symbolic one: pattern,
                graph, key (digest, or "family <digest>"), missed_at (input shapes, or the
                dynamic sizes), misses, why
    sizes       every dynamic size a family missed at (what `warmup --dynamic` takes)
    none_because  why nothing is listed (a sentence), or null when something is
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from ..cache.store import KernelCache
from ..text_table import format_table


def _shapes(record: dict[str, Any]) -> str:
    def one(meta: Sequence[Any]) -> str:
        shape, _, dtype = meta
        return f"{dtype}[{', '.join(map(str, shape))}]"

    return " ".join(one(m) for m in record.get("inputs", []))


def miss_rows(records: Sequence[dict[str, Any]], pattern: str | None = None) -> list[tuple]:
    """(pattern, graph, key or family, what missed, misses, reasons) per static miss and per
    family, in the order first recorded."""
    groups: dict[str, list[dict[str, Any]]] = {}  # family or digest -> its records
    for r in records:
        if not pattern or r.get("pattern") == pattern:
            groups.setdefault(r.get("family") or r["digest"], []).append(r)
    out: list[tuple] = []
    for group in groups.values():
        first = group[0]
        reasons = Counter(r.get("reason") or "no kernel in the cache" for r in group)
        if first.get("family"):
            sizes = sorted({s for r in group for s in r.get("dynamic_sizes", [])})
            what = "dynamic sizes " + (", ".join(map(str, sizes)) or "(unknown)")
            ident = f"family {first['family'][:12]}"
        else:
            what, ident = _shapes(first), first["digest"][:12]
        why = "; ".join(f"{n}x {r}" if n > 1 else r for r, n in reasons.most_common())
        out.append((first.get("pattern"), first.get("graph"), ident, what, len(group), why))
    return out


def none_because(records: Sequence[dict[str, Any]], pattern: str | None, manifest: Path) -> str:
    """Why no miss is listed: another pattern's only, or none recorded, and what records one."""
    if records and pattern:
        others = sorted({str(r.get("pattern")) for r in records})
        return f"none of pattern {pattern!r}; the manifest's are of {', '.join(others)}"
    return (
        f"none recorded in {manifest}. A compile records a miss when it looks a subgraph up in "
        "this cache and finds no kernel: on a CUDA GPU, with search 'cache-only' (the default) "
        "or 'on-miss'. A run without a GPU or with search='off' looks nothing up, and one with "
        "another cache directory (--cache-dir, KERNELPRO_CACHE_DIR) records its misses there"
    )


def print_misses(cache: KernelCache, pattern: str | None, out: TextIO, as_json: bool) -> int:
    records = cache.misses.entries()
    rows = miss_rows(records, pattern)
    sizes = sorted({s for r in records if r.get("family") for s in r.get("dynamic_sizes", [])
                    if not pattern or r.get("pattern") == pattern})  # fmt: skip
    why = None if rows else none_because(records, pattern, cache.misses.path)
    if as_json:
        keys = ("pattern", "graph", "key", "missed_at", "misses", "why")
        print(json.dumps({"manifest": str(cache.misses.path), "misses": sum(r[4] for r in rows),
                          "subgraphs": [dict(zip(keys, r, strict=True)) for r in rows],
                          "sizes": sizes, "none_because": why}, indent=1), file=out)  # fmt: skip
        return 0
    headers = ("PATTERN", "GRAPH", "KEY", "MISSED AT", "MISSES", "WHY")
    print(format_table(headers, rows), file=out)
    print(f"{sum(r[4] for r in rows)} misses in {len(rows)} subgraphs", file=out)
    if why:
        print(why, file=out)
        return 0
    hint = "fill them: kernelpro warmup MODULE:FN"
    if sizes:
        hint += (f" --dynamic DIM={','.join(map(str, sizes))} (DIM: the model argument whose "
                 "size varies; the sizes above are the values of the subgraphs' dynamic dimensions)")  # fmt: skip
    print(hint, file=out)
    return 0
