"""`kernelpro cache misses`: the subgraphs that ran on the fallback for want of a kernel.

Reads the cache's miss manifest (cache/misses.py) and prints one row per static subgraph that
missed and one per symbolic subgraph (a family) with every dynamic size it missed at, with the
recorded reasons, then what to run to fill them.
Owns: the grouping and the table. Must not: search or write the cache.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, TextIO

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


def print_misses(records: Sequence[dict[str, Any]], pattern: str | None, out: TextIO) -> int:
    rows = miss_rows(records, pattern)
    headers = ("PATTERN", "GRAPH", "KEY", "MISSED AT", "MISSES", "WHY")
    print(format_table(headers, rows), file=out)
    sizes = sorted({s for r in records if r.get("family") for s in r.get("dynamic_sizes", [])
                    if not pattern or r.get("pattern") == pattern})  # fmt: skip
    print(f"{sum(r[4] for r in rows)} misses in {len(rows)} subgraphs", file=out)
    if not rows:
        return 0
    hint = "fill them: kernelpro warmup MODULE:FN"
    if sizes:
        hint += (f" --dynamic DIM={','.join(map(str, sizes))} (DIM: the model argument whose "
                 "size varies; the sizes above are the values of the subgraphs' dynamic dimensions)")  # fmt: skip
    print(hint, file=out)
    return 0
