"""L2 eviction policies for the loads of a row program's column loops (as Inductor sets them).

A row read in more than one column loop (RMSNorm: the sum of squares, then the normalisation)
comes from L2 the second time only if it stayed there: its loads in every loop but the last
read it are marked evict_last, in the last evict_first (nothing reads it again); a load whose
addresses do not depend on the row (a norm's weight, read by every row) is evict_last in every
loop. On the H100 (BENCHMARKS.md, rows: RMSNorm forward bf16 4096x65536, 8192-column blocks,
32 warps) the hints took the two-loop kernel from 0.403 to 0.368 ms (max-autotune: 0.364).

Owns: `eviction_plan(spec, col_dims, passes)`.
Must not: emit code (the Emitter writes a planned policy into its load).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from . import index as ix
from .spec import KernelSpec


def eviction_plan(
    spec: KernelSpec, col_dims: Iterable[int], passes: Sequence[set[int]]
) -> dict[tuple[int, int], str]:
    """{(column loop, load index): policy} for the loads each loop of a first rendering read
    (`passes`, in loop order)."""
    cols = set(col_dims)
    readers: dict[str, list[int]] = {}  # the same addresses, however many load entries
    for p, loads in enumerate(passes):
        for i in loads:
            readers.setdefault(_addresses(spec, i), []).append(p)
    plan: dict[tuple[int, int], str] = {}
    for p, loads in enumerate(passes):
        for i in loads:
            if not ix.dims_of(spec.loads[i][2]) - cols:  # every row reads these addresses
                plan[(p, i)] = "evict_last"
                continue
            seen = readers[_addresses(spec, i)]
            if len(seen) > 1:
                plan[(p, i)] = "evict_last" if p < max(seen) else "evict_first"
    return plan


def _addresses(spec: KernelSpec, i: int) -> str:
    inp, offset, index = spec.loads[i]
    return repr((inp, offset, index))
