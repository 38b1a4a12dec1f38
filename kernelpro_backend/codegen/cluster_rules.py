"""When a row program can run as a row-resident CUDA kernel, and the shape of that kernel.

Owns: `cluster_problem(spec, knobs)`: why a spec cannot take the "row_cluster" template with
these knobs (None when it can), and `ClusterShape`: rows, columns, CTAs per row (a thread-block
cluster), threads, vector width, and where each thread holds its values (HOLD: registers,
shared memory, or half in each) with their registers and shared memory.
The kernel (templates/cluster.py) keeps a whole row on chip: a cluster of CLUSTER CTAs splits
the row, each thread holds its share of every input the row's reductions read, the reductions
go warp -> block -> cluster (distributed shared memory), and the outputs are written from
chip: one read and one write of memory, at any row length a cluster holds.
Must not: render source (templates/cluster.py) or import spec.py (knobs.py calls this).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from . import index as ix
from .domain import extent, rows_cols
from .program_walk import FULL, REDUCTIONS, online_pairs, ref_levels

if TYPE_CHECKING:
    from .spec_view import SpecView

FLOATS = {"float32": 4, "bfloat16": 2, "float16": 2}
ROW_DTYPES = set(FLOATS) | {"int64", "int32", "bool"}
INTEGER_LOADS = ("int64", "int32")  # per-element loads read one element at a time
REGISTER_FILE = 65536  # 32-bit registers per SM (H100/H200)
SPARE_REGISTERS = 24  # addresses, loop state and temporaries besides the resident values
MAX_RESIDENT = 64  # resident values per thread: more spill or cost occupancy
SHARED_LIMIT = 227 * 1024 - 1024  # dynamic shared memory a CTA may hold (H100/H200), less static
SHARED_PER_SM = 228 * 1024
MAX_SHARED_PER_THREAD = 256  # values a thread walks in shared memory (its loops are unrolled)


@dataclasses.dataclass(frozen=True)
class ClusterShape:
    rows: int
    cols: int
    cluster: int  # CTAs per row
    threads: int
    vec: int  # elements per vector load/store
    vectors: int  # vectors per row (cols // vec)
    cta_vectors: int  # vectors per CTA
    per_thread: int  # vectors per thread
    resident: tuple[int, ...]  # loads held on chip across the reductions
    # where: each thread's registers, the CTA's shared memory, or the first half of each
    # thread's vectors in registers and the rest in shared memory ("split")
    hold: str = "registers"
    resident_sizes: tuple[int, ...] = ()  # bytes per element of each resident load

    @property
    def elements(self) -> int:
        """Values per thread for each resident load."""
        return self.per_thread * self.vec

    @property
    def in_registers(self) -> int:
        """Values per thread of each resident load held in registers."""
        return registers_held(self.hold, self.per_thread) * self.vec

    def shared_offsets(self) -> tuple[list[int], int]:
        """(byte offset of each resident load's slice, total bytes) in shared memory: the
        CTA's share of the row (HOLD=shared) or of its threads' later vectors (split), in the
        input's own dtype, 16-byte aligned; enough for the 1-element body too."""
        elements = 0
        if self.hold == "shared":
            elements = self.cta_vectors * self.vec
        elif self.hold == "split":
            one = math.ceil(self.cta_vectors * self.vec / self.threads)  # the 1-element body's
            elements = self.threads * max(
                (self.per_thread - self.per_thread // 2) * self.vec, one - one // 2
            )
        offsets, total = [], 0
        for size in self.resident_sizes:
            offsets.append(total)
            total += -(-elements * size // 16) * 16
        return offsets, total


def registers_held(hold: str, per_thread: int) -> int:
    """Of a thread's `per_thread` vectors of each resident load, how many sit in registers
    (its first ones); the rest are in shared memory."""
    return {"registers": per_thread, "shared": 0, "split": per_thread // 2}[hold]


def level_of(spec: SpecView, index: Any, cols: tuple[int, ...]) -> int:
    """0: the same for every element (scalar), 1: per row, 2: per element."""
    dims = ix.dims_of(index)
    return 2 if dims & set(cols) else 1 if dims else 0


def per_element_stores(spec: SpecView) -> list[int]:
    """The outputs written an element at a time (after the row's reductions): the row
    template's and split rows' write pass."""
    cols = rows_cols(spec)[1]
    return [
        k for k, (_, _, index, _) in enumerate(spec.stores) if level_of(spec, index, cols) == FULL
    ]


def split_index(index: Any, rows: tuple[int, ...], cols: tuple[int, ...]) -> Any:
    """(row part, column part) of an index, or None when a term mixes row and column dims."""
    row_terms, col_terms = [], []
    for coef, atom in index:
        dims = ix.dims_of(((coef, atom),))
        if dims <= set(rows):
            row_terms.append((coef, atom))
        elif dims <= set(cols):
            col_terms.append((coef, atom))
        else:
            return None
    return ix.make(row_terms), ix.make(col_terms)


def flat_columns(spec: SpecView, cols: tuple[int, ...]) -> Any:
    """The index of a row-major walk over the column dims: what a contiguous row reads. Dims of
    extent 1 have no term (their coordinate is always 0; an instance norm reduces over a batch
    dim of 1 and the lowering writes no term for it)."""
    cols = tuple(d for d in cols if spec.domain[d] != 1)
    strides = ix.contiguous_strides([spec.domain[d] for d in cols])
    return ix.make([(s, d) for s, d in zip(strides, cols, strict=True)])


def row_of_walk(spec: SpecView, index: Any, cols: tuple[int, ...]) -> Any:
    """The row part of an index whose column part walks the row in order (row-major over the
    column dims), or None: for a per-row index, one that repeats along the row (a group norm's
    per-channel weight) or one that mixes row and column dims."""
    rows = tuple(d for d in range(len(spec.domain)) if d not in cols)
    parts = split_index(index, rows, cols)
    if parts is None or not parts[1] or parts[1] != flat_columns(spec, cols):
        return None
    return parts[0]


def walks_row(spec: SpecView, index: Any, cols: tuple[int, ...]) -> bool:
    """Whether a per-element index reads the row in order (a vector at a time); one that
    repeats along the row is read an element at a time."""
    return row_of_walk(spec, index, cols) is not None


def resident_loads(spec: SpecView, cols: tuple[int, ...]) -> tuple[int, ...]:
    """Per-element float loads that a reduction reads (through per-element ops): held on chip
    from the first read to the last write; other per-element loads (and integer ones, e.g. a
    column index input, or ones that repeat along the row) are read when used."""
    full = {
        i for i, (inp, _, idx) in enumerate(spec.loads)
        if level_of(spec, idx, cols) == 2 and spec.inputs[inp][2] in FLOATS
        and walks_row(spec, idx, cols)
    }  # fmt: skip
    found: set[int] = set()
    stack = [a for op, args, _ in spec.ops if op in REDUCTIONS for a in args[:1]]
    seen: set[Any] = set()
    while stack:
        ref = stack.pop()
        if ref in seen or ref[0] not in ("L", "T"):
            continue
        seen.add(ref)
        if ref[0] == "L":
            if ref[1] in full:
                found.add(ref[1])
        elif spec.ops[ref[1]][0] not in REDUCTIONS:
            stack.extend(spec.ops[ref[1]][1])
    return tuple(sorted(found))


def cluster_problem(spec: SpecView, knobs: dict[str, Any]) -> str | None:
    """Why `spec` cannot run as a row-resident cluster kernel with `knobs`; None if it can."""
    rows, cols = rows_cols(spec)
    if not cols:
        return "the program reduces over no dims"
    problem = _layout_problem(spec, rows, cols, int(knobs["VEC"]))
    if problem:
        return problem
    shape = cluster_shape(spec, knobs)
    if shape.per_thread * shape.threads < shape.cta_vectors:
        return "the row does not fit"  # cannot happen: per_thread rounds up
    limit = min(255, REGISTER_FILE // shape.threads) - SPARE_REGISTERS
    held = shape.in_registers * max(1, len(shape.resident))
    if shape.hold != "registers":
        problem = _shared_problem(shape)
        if problem:
            return problem
    if held > min(limit, MAX_RESIDENT):
        return (
            f"each thread would hold {held} values in registers (at most "
            f"{min(limit, MAX_RESIDENT)} with {shape.threads} threads); use a larger CLUSTER "
            "or more warps"
        )
    if shape.cluster > 1 and shape.cta_vectors * (shape.cluster - 1) >= shape.vectors:
        return f"CLUSTER={shape.cluster} leaves a CTA without columns; use a smaller cluster"
    if knobs.get("ONLINE") == "pair" and not pair_reductions(spec, cols):
        return "ONLINE=pair merges a max with the sum of exp(y - max); this program has none"
    if shape.rows * shape.cluster >= 2**31:
        return f"{shape.rows} rows x CLUSTER={shape.cluster} CTAs exceed the grid limit"
    return None


def _shared_problem(shape: ClusterShape) -> str | None:
    if not shape.resident:
        return (
            f"HOLD={shape.hold} keeps the inputs a reduction reads; this program reads none twice"
        )
    if shape.hold == "split" and shape.per_thread < 2:
        return "HOLD=split needs at least two vectors per thread; use fewer warps or HOLD=shared"
    _, total = shape.shared_offsets()
    if total > SHARED_LIMIT:
        return (
            f"the CTA's share of the row needs {total} bytes of shared memory (at most "
            f"{SHARED_LIMIT}); use a larger CLUSTER"
        )
    if shape.elements > MAX_SHARED_PER_THREAD:
        return (
            f"each thread would walk {shape.elements} values (at most {MAX_SHARED_PER_THREAD}); "
            "use more warps or a larger CLUSTER"
        )
    return None


def pair_reductions(spec: SpecView, cols: tuple[int, ...]) -> dict[int, int]:
    """max -> sum of exp(y - max) among the reductions over the row's elements."""
    levels = ref_levels(spec, lambda idx: level_of(spec, idx, cols))
    looped = [
        i for i, (op, args, _) in enumerate(spec.ops)
        if op in REDUCTIONS and args[0][0] != "c" and levels[args[0]] == 2
    ]  # fmt: skip
    return online_pairs(spec, looped)


def cluster_shape(spec: SpecView, knobs: dict[str, Any]) -> ClusterShape:
    rows, cols = rows_cols(spec)
    n_cols, vec = extent(spec, cols), int(knobs["VEC"])
    cluster, threads = int(knobs["CLUSTER"]), 32 * int(knobs["num_warps"])
    vectors = n_cols // vec
    cta_vectors = math.ceil(vectors / cluster)
    resident = resident_loads(spec, cols)
    return ClusterShape(
        rows=extent(spec, rows),
        cols=n_cols,
        cluster=cluster,
        threads=threads,
        vec=vec,
        vectors=vectors,
        cta_vectors=cta_vectors,
        per_thread=math.ceil(cta_vectors / threads),
        resident=resident,
        hold=str(knobs.get("HOLD", "registers")),
        resident_sizes=tuple(FLOATS.get(spec.inputs[spec.loads[i][0]][2], 4) for i in resident),
    )


def _layout_problem(spec: SpecView, rows: tuple, cols: tuple, vec: int) -> str | None:
    n_cols = extent(spec, cols)
    if n_cols % vec:
        return f"VEC={vec} does not divide the row length {n_cols}; use a smaller VEC"
    flat = flat_columns(spec, cols)
    inputs = spec.inputs
    gathers = [args for op, args, _ in spec.ops if op == "gather"]
    if gathers and len(cols) != 1:
        return "a row gather over several column dims"
    for op, _, dtype in spec.ops:
        if op in REDUCTIONS and dtype not in FLOATS:
            return f"a {op} reduction in {dtype}: only float reductions are kept on chip"
    accesses = [(inputs[k][2], off, idx, "load") for k, off, idx in spec.loads]
    accesses += [
        (spec.outputs[k][2], off, idx, "store") for k, (_, off, idx, _) in enumerate(spec.stores)
    ]
    for k, (_, _, _, predicate) in enumerate(spec.stores):
        if predicate and level_of(spec, predicate[0], cols) == 2:
            return f"store {k} is predicated per element"
    for dtype, offset, index, what in accesses:
        parts = split_index(index, rows, cols)
        if parts is None:
            return f"a {what} index mixes row and column dims"
        row_part, col_part = parts
        if not col_part:
            if dtype not in ROW_DTYPES:
                return f"a per-row {what} of {dtype}"
            continue
        if col_part != flat:
            inner = [d for d in cols if spec.domain[d] != 1][-1:]
            if what == "store" or ix.dims_of(col_part) & set(inner):
                return (
                    f"a {what} walks the row with strides: the cluster kernel reads rows in order"
                )
            continue  # repeats along the row: read an element at a time where used, never held
        if dtype not in FLOATS:
            if what == "store" or dtype not in INTEGER_LOADS:
                return f"a per-element {what} of {dtype}: only float rows are vectorised"
            continue  # an integer row (a column index) is read an element at a time
        if vec * FLOATS[dtype] > 16:
            return f"VEC={vec} {dtype} is wider than a 16-byte access; use a smaller VEC"
        if offset % vec or any(c % vec for c, _ in row_part):
            return f"a {what}'s rows do not start on a VEC={vec} boundary; use a smaller VEC"
    return None
