"""The pointwise and row-reduction template: one program owns ROWS rows of the domain.

Owns: the Triton kernel for pointwise chains (columns = the domain's last dim) and for
reduction/normalisation chains (columns = the reduced dims, last or not: column sums and
batch-norm statistics are the same template with strided columns). A row that fits BLOCK_C is
loaded once and reduced in registers; a longer row is walked once per wave of reductions - the
reductions whose per-row operands are known by then share one pass - and once more to write
full-row outputs (softmax: max pass, sum pass, write pass; cross-entropy: max and target pick
in one pass, then the sum pass), recomputing the per-element prologue from the inputs. Under
VARIANCE=welford a variance's two waves (the sum, then the squared deviations from its mean:
a batch norm's or a layer norm's statistics) share one pass (templates/row_welford.py).
Must not: lower aten or launch anything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import index as ix
from ..cluster_rules import per_element_stores
from ..domain import cdiv, extent, rows_cols
from ..emitter import ARG_EXTREME, FULL, REDUCTIONS, Emitter
from ..eviction import eviction_plan
from ..program_walk import ARG_REDUCTIONS, online_pairs, reduction_ready, variance_pairs
from ..row_rules import contiguous_rows
from ..spec import KernelSpec
from ..spec_view import io_names
from .row_welford import welford_finish, welford_start, welford_step

_INT32_MAX = 2**31 - 1
NINF = 'float("-inf")'


def _coord_lines(var: str, dims: tuple[int, ...], domain: tuple[int, ...]) -> list[str]:
    out = []
    stride = 1
    strides = {}
    for d in reversed(dims):
        strides[d] = stride
        stride *= domain[d]
    for i, d in enumerate(dims):
        text = var if strides[d] == 1 else f"({var} // {strides[d]})"
        if i > 0:
            text = f"({text} % {domain[d]})"
        out.append(f"d{d} = {text}")
    return out


def _needs_int64(spec: KernelSpec) -> bool:
    sizes = list(spec.domain)
    entries = [(off, idx) for _, off, idx in spec.loads] + [
        (off, idx) for _, off, idx, _ in spec.stores
    ]
    spans = [off + ix.max_value(idx, sizes) for off, idx in entries]
    return max([*spans, 0]) > _INT32_MAX // 2


def rows_head(spec: KernelSpec, name: str, params: list[str], em: Emitter, wide: str) -> list[str]:
    """The signature and first lines of a kernel whose program takes ROWS consecutive rows;
    the rows' coordinates go into `em`."""
    rows, _ = rows_cols(spec)
    for text in _coord_lines("row", rows, spec.domain):
        em.line(text)
    return [
        "@triton.jit",
        f"def {name}({', '.join(params)}, ROWS: tl.constexpr, BLOCK_C: tl.constexpr):",
        f"    row = tl.program_id(0){wide} * ROWS + tl.arange(0, ROWS)[:, None]",
        f"    row_mask = row < {extent(spec, rows)}",
    ]


def render_rowwise(spec: KernelSpec) -> tuple[str, str]:
    """(kernel source, grid expression). Rendered twice where the program has column loops:
    the first rendering says which loads each loop reads, the second carries their L2 eviction
    policies (eviction.py)."""
    source, grid, plan = _first_rendering(spec)
    if plan:
        source, grid, _ = _render(spec, plan)
    return source, grid


def rereads_rows(spec: KernelSpec) -> bool:
    """Whether the program reads a row's elements in more than one column loop (statistics
    first, then the outputs from the row again)."""
    return "evict_first" in _first_rendering(spec)[2].values()


def _first_rendering(spec: KernelSpec) -> tuple[str, str, dict[tuple[int, int], str]]:
    """(source, grid) without eviction hints, and the hints planned from the loads it read."""
    source, grid, em = _render(spec, {})
    return source, grid, eviction_plan(spec, rows_cols(spec)[1], em.pass_loads)


def _render(spec: KernelSpec, eviction: dict[tuple[int, int], str]) -> tuple[str, str, Emitter]:
    rows, cols = rows_cols(spec)
    n_rows, n_cols = extent(spec, rows), extent(spec, cols)
    block_c = int(spec.knob("BLOCK_C"))
    flat = "col" if spec.template == "row_reduction" else None
    em = Emitter(spec, [f"d{k}" for k in range(len(spec.domain))], cols, n_cols, flat_col=flat)
    em.eviction = eviction
    wide = ".to(tl.int64)" if _needs_int64(spec) else ""
    params = [name for names in io_names(spec) for name in names]
    em.lines = []
    inner = contiguous_rows(spec, rows)
    if inner:  # the rows' last dim is the domain's innermost: its own grid axis, no modulo
        em.scalar_dims = set(rows[:-1])  # one `outer` per program
        n_outer = n_rows // inner
        head = [
            "@triton.jit",
            f"def kernel({', '.join(params)}, ROWS: tl.constexpr, BLOCK_C: tl.constexpr):",
            f"    inner = tl.program_id(0){wide} * ROWS + tl.arange(0, ROWS)[:, None]",
            f"    outer = tl.program_id(1){wide}",
            f"    row = outer * {inner} + inner",
            f"    row_mask = inner < {inner}",
        ]
        for text in _coord_lines("outer", rows[:-1], spec.domain):
            em.line(text)
        em.line(f"d{rows[-1]} = inner")
        grid = f"(triton.cdiv({inner}, {spec.knob('ROWS')}), {n_outer})"
    elif dict(spec.knobs).get("SM_SHARE", 0):  # a capped grid: each program loops over row blocks
        head, grid = _looping_head(spec, params, em, wide, n_rows)
    else:
        head = rows_head(spec, "kernel", params, em, wide)
        grid = f"(triton.cdiv({n_rows}, {spec.knob('ROWS')}),)"
    needed = em.needed()

    def open_columns(start: str) -> None:
        em.line(f"col = {start}tl.arange(0, BLOCK_C)[None, :]{wide}")
        em.line(f"mask = row_mask & (col < {n_cols})")
        for text in _coord_lines("col", cols, spec.domain):
            em.line(text)

    if block_c >= n_cols:
        open_columns("")
        for k in range(len(spec.stores)):
            em.store(k, f"out{k}")
    else:
        _looped(spec, em, needed, open_columns)
    return "\n".join(em.helper_source() + head + em.lines), grid, em


def _looping_head(
    spec: KernelSpec, params: list[str], em: Emitter, wide: str, n_rows: int
) -> tuple[list[str], str]:
    """SM_SHARE > 0: a grid of SM_SHARE% of the SMs' count of programs (at most one a row
    block), each taking every grid-th block of ROWS rows in turn. The same bytes move; fewer
    SMs hold programs, which the energy objective weighs (search/rules.py)."""
    rows, _ = rows_cols(spec)
    blocks = cdiv(n_rows, int(spec.knob("ROWS")))
    em.indent = 2  # the program's lines sit in the loop over its blocks
    for text in _coord_lines("row", rows, spec.domain):
        em.line(text)
    head = [
        "@triton.jit",
        f"def kernel({', '.join(params)}, ROWS: tl.constexpr, BLOCK_C: tl.constexpr):",
        f"    for block in range(tl.program_id(0), {blocks}, tl.num_programs(0)):",
        f"        row = block{wide} * ROWS + tl.arange(0, ROWS)[:, None]",
        f"        row_mask = row < {n_rows}",
    ]
    share = int(spec.knob("SM_SHARE"))
    return head, f"(min({blocks}, max(1, num_sms * {share} // 100)),)"


def _column_pass(
    spec: KernelSpec,
    em: Emitter,
    looped: list[int],
    online: dict[int, int],
    n_cols: int,
    open_columns: Callable[[str], None],
    span: tuple[str, str] | None = None,
    variance: dict[int, int] | None = None,
) -> None:
    """One loop over the row's column blocks (or `span`'s: (first, end) expressions, a split
    row's chunk) accumulating the `looped` reductions (a sum in `variance` with the sum of
    squared deviations from its mean, by Welford: row_welford.py), and for each
    max in `online` the sum of exp(y - max) beside it: per lane (knob ONLINE "lane"), the
    running max and the sum rescaled whenever the max grows (exp(old - new); 0 while a lane has
    seen only -inf) — two exps an element; or per block ("block"), the block's max reduced
    first, then one exp an element and one rescale a row per step."""
    block = dict(spec.knobs).get("ONLINE") == "block"
    picked = [i for i in looped if em.pickable(spec.ops[i][0], spec.ops[i][1])]
    looped = [i for i in looped if i not in picked]
    variance = variance or {}
    _start_pass(spec, em, looped, online, variance, n_cols)
    lo, hi = span or ("0", str(n_cols))
    em.line(f"for c0 in range({lo}, {hi}, BLOCK_C):")
    em.indent += 1
    em.begin_pass()
    open_columns("c0 + ")
    for i in looped:
        op, args, _ = spec.ops[i]
        if i in variance:
            welford_step(em, i, args[0])
            continue
        if op in ARG_REDUCTIONS:
            _arg_step(em, i, op, args, n_cols)
            continue
        if i not in online:
            em.line(em.accumulate(op, args, f"acc{i}"))
            continue
        s, y = online[i], f"y{i}"
        em.line(f"{y} = tl.where(mask, {em.value(args[0])}, {NINF})")
        # NaN propagates into the running max, and from it into the rescaled sum
        top = em.finish("max", y) if block else y  # the block's max per row, or per lane
        em.line(f"new{i} = tl.maximum(acc{i}, {top}, propagate_nan=tl.PropagateNan.ALL)")
        term = f"tl.where({y} == {NINF}, 0.0, tl.exp({y} - new{i}))"
        em.line(
            f"acc{s} = acc{s} * tl.where(new{i} == {NINF}, 0.0, tl.exp(acc{i} - new{i})) "
            f"+ {f'tl.sum({term}, axis=1)[:, None]' if block else term}"
        )
        em.line(f"acc{i} = new{i}")
    em.indent -= 1
    for i in looped:
        name = f"t_red{i}"
        op = spec.ops[i][0]
        if i in variance:
            welford_finish(em, i, variance[i])
            continue
        if op in ARG_REDUCTIONS:
            _arg_finish(em, i, op, n_cols)
        elif block and i in online:
            em.line(f"{name} = acc{i}")  # already one value a row
        else:
            em.line(f"{name} = {em.finish(op, f'acc{i}')}")
        em.global_memo[("T", i)] = name
        if i in online:
            s = online[i]
            scaled = f"acc{s} * tl.where(acc{i} == {NINF}, 0.0, tl.exp(acc{i} - {name}))"
            em.line(
                f"t_red{s} = acc{s}" if block else f"t_red{s} = tl.sum({scaled}, axis=1)[:, None]"
            )
            em.global_memo[("T", s)] = f"t_red{s}"
    for i in picked:  # a row gather of an input: one load per row, no column loop
        em.line(f"t_red{i} = {em.picked_gather(spec.ops[i][1])}")
        em.global_memo[("T", i)] = f"t_red{i}"


def _start_pass(
    spec: KernelSpec,
    em: Emitter,
    looped: list[int],
    online: dict[int, int],
    variance: dict[int, int],
    n_cols: int,
) -> None:
    """The column pass's accumulators, before its loop (rowwise._column_pass)."""
    block = dict(spec.knobs).get("ONLINE") == "block"
    for i in looped:
        if i in variance:
            welford_start(em, i)
        elif spec.ops[i][0] in ARG_REDUCTIONS:
            _arg_start(em, i, n_cols)
        elif block and i in online:
            em.line(f"acc{i} = tl.full([ROWS, 1], {NINF}, tl.float32)")
        else:
            em.line(em.accumulator(spec.ops[i][0], f"acc{i}"))
    for s in online.values():
        em.line(
            f"acc{s} = tl.zeros([ROWS, 1], tl.float32)"
            if block
            else em.accumulator("sum", f"acc{s}")
        )


def _arg_start(em: Emitter, i: int, n_cols: int) -> None:
    """Per-lane state of an argmax/argmin over column blocks: the extreme seen, its column and
    the first NaN's column (n_cols: none yet)."""
    ext = ARG_EXTREME[em.spec.ops[i][0]][0]
    em.line(f"best{i} = tl.full([ROWS, BLOCK_C], {ext}, tl.float32)")
    em.line(f"idx{i} = tl.full([ROWS, BLOCK_C], {n_cols}, tl.int64)")
    em.line(f"nan{i} = tl.full([ROWS, BLOCK_C], {n_cols}, tl.int64)")


def _arg_step(em: Emitter, i: int, op: str, args: Any, n_cols: int) -> None:
    """One column block: a lane takes a value beating its best (the first one it sees when it
    has none), so within a lane, whose columns only grow, ties keep the first column."""
    v, col = em.value(args[0]), em.coords[args[1][1]]
    beats = ">" if op == "argmax" else "<"
    em.line(f"take{i} = mask & ({v} == {v}) & (({v} {beats} best{i}) | (idx{i} == {n_cols}))")
    em.line(f"best{i} = tl.where(take{i}, {v}, best{i})")
    em.line(f"idx{i} = tl.where(take{i}, {col}, idx{i})")
    em.line(f"nan{i} = tl.minimum(nan{i}, tl.where(mask & ({v} != {v}), {col}, {n_cols}))")


def _arg_finish(em: Emitter, i: int, op: str, n_cols: int) -> None:
    """The lanes combined: the first column among those holding the extreme, or the first
    NaN's column when the row has one."""
    pick = ARG_EXTREME[op][1]
    em.line(f"m{i} = {pick}(best{i}, axis=1)[:, None]")
    em.line(
        f"f{i} = tl.min(tl.where((best{i} == m{i}) & (idx{i} < {n_cols}), idx{i}, {n_cols}), "
        "axis=1)[:, None]"
    )
    em.line(f"n{i} = tl.min(nan{i}, axis=1)[:, None]")
    em.line(f"t_red{i} = tl.where(n{i} < {n_cols}, n{i}, f{i})")


def row_values(spec: KernelSpec, em: Emitter, needed: set[Any]) -> None:
    """Before any column loop: the needed per-row loads, then every per-row value they make."""
    for i in range(len(spec.loads)):
        if ("L", i) in needed and em.level(("L", i)) != FULL:
            em.value(("L", i))
    em.emit_ready_rows(needed)


def _looped(
    spec: KernelSpec, em: Emitter, needed: set[Any], open_columns: Callable[[str], None]
) -> None:
    row_values(spec, em, needed)
    n_cols = extent(spec, rows_cols(spec)[1])
    pending = [
        i for i, (op, _, _) in enumerate(spec.ops) if op in REDUCTIONS and ("T", i) in needed
    ]
    pairs = online_pairs(spec, pending)
    one_pass = dict(spec.knobs).get("VARIANCE") == "welford"
    welford = variance_pairs(spec, pending, n_cols) if one_pass else {}
    while pending:
        wave = [
            i for i in pending if reduction_ready(spec, spec.ops[i][1], em.global_memo, em.level)
        ]
        if not wave:
            raise AssertionError(f"reductions {pending} wait on values no pass computes")
        pending = [i for i in pending if i not in wave]
        looped = []
        for i in wave:
            op, args, _ = spec.ops[i]
            if em.level(args[0]) != FULL:
                em.value(("T", i))  # constant along the row: no pass needed
            else:
                looped.append(i)
        # A sum of exp(y - max(y)) joins its max's pass (online log-sum-exp); a sum of
        # squared deviations from a sum's mean joins that sum's under VARIANCE=welford.
        online = {m: pairs[m] for m in looped if m in pairs and pairs[m] in pending}
        variance = {a: welford[a] for a in looped if a in welford and welford[a] in pending}
        pending = [i for i in pending if i not in (*online.values(), *variance.values())]
        if looped:
            _column_pass(spec, em, looped, online, n_cols, open_columns, variance=variance)
        em.emit_ready_rows(needed)
    full = per_element_stores(spec)
    if full:
        write_pass(em, full, ("0", str(n_cols)), open_columns)
    for k in range(len(spec.stores)):
        if k not in full:
            em.store(k, f"out{k}")


def write_pass(
    em: Emitter, stores: list[int], span: tuple[str, str], open_columns: Callable[[str], None]
) -> None:
    """One loop over the column blocks of `span` ((first, end) expressions: the row, or a split
    row's chunk) writing the per-element outputs `stores`."""
    em.line(f"for c0 in range({span[0]}, {span[1]}, BLOCK_C):")
    em.indent += 1
    em.begin_pass()
    open_columns("c0 + ")
    for k in stores:
        em.store(k, f"out{k}")
    em.indent -= 1
