"""Split rows: a reduction over few, long rows (a loss's mean over every element, a sum over
the last dim of a handful of rows) in two launches, so the whole GPU reads the row.

The row template gives each row one program: a full reduction is one program looping over
gigabytes while the other SMs idle. Here SPLIT programs share each row, each reducing its
chunk of columns (a whole number of BLOCK_C blocks) into a float32 partial; a second kernel
combines a row's partials in a fixed order (deterministic, unlike atomics), computes what
follows the reductions on the row and stores the row's outputs. Programs it takes: every
reduction a float sum, max or min of per-element values that no other reduction feeds (one
wave), and only per-row outputs (a softmax's per-element output needs its row's statistics:
the row template or the row-resident kernel).

Owns: `render_split(spec)` (split_rules.py says which programs it takes).
Must not: decide when a split pays (defaults.alternatives proposes it, the search times it).
"""

from __future__ import annotations

from ..domain import extent, next_pow2, rows_cols
from ..emitter import REDUCTION_IDENTITY, Emitter
from ..spec import KernelSpec
from ..spec_view import io_names
from ..split_rules import chunk_columns, reductions_of


def render_split(spec: KernelSpec) -> tuple[str, list[str], list[tuple[str, str, str]]]:
    """(the two kernels' source, host lines allocating the partials, the two launches) for
    render.render_launches."""
    from .rowwise import _column_pass, _coord_lines, _needs_int64, row_values, rows_head

    rows, cols = rows_cols(spec)
    n_rows, n_cols = extent(spec, rows), extent(spec, cols)
    split, chunk = int(spec.knob("SPLIT")), chunk_columns(spec)
    reductions = reductions_of(spec)
    names = [f"d{k}" for k in range(len(spec.domain))]
    wide = ".to(tl.int64)" if _needs_int64(spec) else ""
    ins, outs = io_names(spec)
    slot = f"(row * {split} + part_id) * {len(reductions)}"

    # 1: each program reduces its chunk of its row into one partial per reduction
    first = Emitter(spec, names, cols, n_cols, flat_col="col")
    head1 = rows_head(spec, "partial", [*ins, "partials"], first, wide)
    first.line(f"part_id = tl.program_id(1){wide}")
    first.line(f"lo = part_id * {chunk}")
    first.line(f"hi = tl.minimum(lo + {chunk}, {n_cols})")
    row_values(spec, first, first.needed())

    def open_columns(start: str) -> None:
        first.line(f"col = {start}tl.arange(0, BLOCK_C)[None, :]{wide}")
        first.line("mask = row_mask & (col < hi)")
        for text in _coord_lines("col", cols, spec.domain):
            first.line(text)

    # split_rules admits only reductions of per-element values: all of them loop
    _column_pass(spec, first, reductions, {}, n_cols, open_columns, span=("lo", "hi"))
    for r, i in enumerate(reductions):
        first.line(f"tl.store(partials + {slot} + {r}, {first.value(('T', i))}, mask=row_mask)")

    # 2: each row's partials combined in order, then its outputs
    second = Emitter(spec, names, cols, n_cols)
    head2 = rows_head(spec, "combine", [*ins, *outs, "partials"], second, wide)
    width = next_pow2(split)
    second.line(f"part_id = tl.arange(0, {width})[None, :]")
    for r, i in enumerate(reductions):
        op = spec.ops[i][0]
        second.line(
            f"p{i} = tl.load(partials + {slot} + {r}, mask=row_mask & (part_id < {split}), "
            f"other={REDUCTION_IDENTITY[op]})"
        )
        second.line(f"t_red{i} = {second.finish(op, f'p{i}')}")
        second.global_memo[("T", i)] = f"t_red{i}"
    needed = second.needed()
    second.emit_ready_rows(needed)
    for k in range(len(spec.stores)):
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
    launches = [
        ("partial", f"({n_rows}, {split})", f"{', '.join(ins)}, partials, {block}, {warps}"),
        ("combine", f"({n_rows},)", f"{', '.join([*ins, *outs])}, partials, {block}, num_warps=1"),
    ]
    return kernels, scratch, launches
