"""Split rows: a reduction over few, long rows (a loss's mean over every element, a sum over
the last dim of a handful of rows) in two launches, so the whole GPU reads the row.

The row template gives each row one program: a full reduction is one program looping over
gigabytes while the other SMs idle. Here SPLIT programs share each row, each reducing its
chunk of columns (a whole number of BLOCK_C blocks) into a float32 partial; a second kernel
combines a row's partials in a fixed order (deterministic, unlike atomics), computes what
follows the reductions on the row and stores the row's outputs. Programs it takes: every
reduction a float sum, max or min of per-element values that no other reduction feeds (one
wave: a softmax's max then sum needs its row walked twice, the row template or the
row-resident kernel), except a variance's two waves, which each chunk computes in one Welford
pass and the combining kernel merges by Chan's formula (row_welford.py: a batch norm's or a
layer norm's statistics). Per-element outputs after the reductions (a batch norm's input gradient
beside its sums over N, H, W: a few channels, each a long row) are written by the combining
kernel too, then gridded like the first: each program combines its row's partials - every
program of a row the same way, so they agree - and writes its own chunk; the row's first
program stores the per-row outputs.

Owns: `render_split(spec)` (split_rules.py says which programs it takes).
Must not: decide when a split pays (defaults.alternatives proposes it, the search times it).
"""

from __future__ import annotations

from collections.abc import Callable

from ..cluster_rules import per_element_stores
from ..domain import extent, next_pow2, rows_cols
from ..emitter import REDUCTION_IDENTITY, Emitter
from ..program_walk import variance_pairs
from ..spec import KernelSpec
from ..spec_view import io_names
from ..split_rules import chunk_columns, reductions_of
from .row_welford import welford_combine


def render_split(spec: KernelSpec) -> tuple[str, list[str], list[tuple[str, str, str]]]:
    """(the two kernels' source, host lines allocating the partials, the two launches) for
    render.render_launches."""
    from .rowwise import _column_pass, _needs_int64, row_values, write_pass

    rows, cols = rows_cols(spec)
    n_rows, n_cols = extent(spec, rows), extent(spec, cols)
    split = int(spec.knob("SPLIT"))
    reductions = reductions_of(spec)
    wide = ".to(tl.int64)" if _needs_int64(spec) else ""
    ins, outs = io_names(spec)

    def slot(part: str) -> str:
        return f"(row * {split} + {part}) * {len(reductions)}"

    # 1: each program reduces its chunk of its row into one partial per reduction
    first, head1, open1 = _chunk_program(spec, "partial", [*ins, "partials"], wide)
    row_values(spec, first, first.needed())
    # split_rules admits only reductions of per-element values: all of them loop, a variance's
    # squared deviations in its sum's pass (Welford: row_welford.py)
    pairs = variance_pairs(spec, reductions, n_cols)
    looped = [i for i in reductions if i not in pairs.values()]
    _column_pass(spec, first, looped, {}, n_cols, open1, span=("lo", "hi"), variance=pairs)
    for r, i in enumerate(reductions):
        value = first.value(("T", i))
        first.line(f"tl.store(partials + {slot('part_id')} + {r}, {value}, mask=row_mask)")

    # 2: each row's partials combined in order (every program of a row the same way), then its
    # outputs: per-element ones over the program's chunk, per-row ones by the row's first
    second, head2, open2 = _chunk_program(spec, "combine", [*ins, *outs, "partials"], wide)
    second.line(f"parts = tl.arange(0, {next_pow2(split)})[None, :]")
    for r, i in enumerate(reductions):
        op = spec.ops[i][0]
        second.line(
            f"p{i} = tl.load(partials + {slot('parts')} + {r}, mask=row_mask & (parts < {split}), "
            f"other={REDUCTION_IDENTITY[op]})"
        )
    if pairs:  # each chunk's columns: its M2 is about its own mean
        chunk = chunk_columns(spec)
        second.line(
            f"counts = tl.where(parts < {split}, tl.maximum(tl.minimum((parts + 1) * {chunk}, "
            f"{n_cols}) - parts * {chunk}, 0), 0).to(tl.float32)"
        )
    for i in reductions:
        if i in pairs:
            welford_combine(second, i, pairs[i], f"p{i}", f"p{pairs[i]}", "counts")
        elif i not in pairs.values():
            second.line(f"t_red{i} = {second.finish(spec.ops[i][0], f'p{i}')}")
            second.global_memo[("T", i)] = f"t_red{i}"
    row_values(spec, second, second.needed())
    full = per_element_stores(spec)
    if full:
        write_pass(second, full, ("lo", "hi"), open2)
        second.line("row_mask = row_mask & (row * 0 + part_id == 0)")  # a block: a mask
    for k in range(len(spec.stores)):
        if k not in full:
            second.store(k, f"out{k}")

    second.helpers |= first.helpers  # each helper defined once, before both kernels
    kernels = "\n".join(
        [*second.helper_source(), *head1, *first.lines, "", "", *head2, *second.lines]
    )
    scratch = [
        f"    partials = torch.empty({n_rows * split * len(reductions)}, dtype=torch.float32, "
        "device=device)"
    ]
    warps = f"num_warps={spec.knob('num_warps')}, num_stages={spec.knob('num_stages')}"
    block = f"ROWS=1, BLOCK_C={spec.knob('BLOCK_C')}"
    grid = f"({n_rows}, {split})"
    launches = [
        ("partial", grid, f"{', '.join(ins)}, partials, {block}, {warps}"),
        (
            "combine",
            grid if full else f"({n_rows},)",
            f"{', '.join([*ins, *outs])}, partials, {block}, {warps if full else 'num_warps=1'}",
        ),
    ]
    return kernels, scratch, launches


def _chunk_program(
    spec: KernelSpec, name: str, params: list[str], wide: str
) -> tuple[Emitter, list[str], Callable[[str], None]]:
    """A kernel whose program (row, part_id) owns the columns [lo, hi) of its row: its emitter,
    head and the opener of a column block inside the chunk."""
    from .rowwise import _coord_lines, rows_head

    cols = rows_cols(spec)[1]
    n_cols = extent(spec, cols)
    names = [f"d{k}" for k in range(len(spec.domain))]
    em = Emitter(spec, names, cols, n_cols, flat_col="col")
    head = rows_head(spec, name, params, em, wide)
    em.line(f"part_id = tl.program_id(1){wide}")
    chunk = chunk_columns(spec)
    em.line(f"lo = part_id * {chunk}")
    em.line(f"hi = tl.minimum(lo + {chunk}, {n_cols})")

    def open_columns(start: str) -> None:
        em.line(f"col = {start}tl.arange(0, BLOCK_C)[None, :]{wide}")
        em.line("mask = row_mask & (col < hi)")
        for text in _coord_lines("col", cols, spec.domain):
            em.line(text)

    return em, head, open_columns
