"""Emitting a spec's op list as Triton statements inside a template's tile.

Owns: the level of each value (scalar, per row, or per element of the tile), loads and stores
with their masks, on-demand emission of the ops a value needs (memoised per scope), and the
two reduction forms: inline over a tile that covers the row, or accumulated over a column loop.
A row max/min is one reduction whose combine function propagates NaN, as PyTorch's do.
A row gather ("gather": the element at column `index` of each row) of an input is one load per
row at that column; of a computed value, the masked reduction
sum_c where(c == index, bits(x[c]), 0) over the float32 bit patterns as int32, bitcast back:
one term is not zero, and integer zeros add exactly, so the result is the picked element bit
for bit (-0.0 and NaN payloads included), whatever order or start value the reduction uses - a
float sum would turn a picked -0.0 into +0.0 on a reduction that starts from +0.0.
Must not: decide the kernel's loop structure (the templates do) or know aten.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import index as ix
from .optable import LOW_FLOATS, TL_DTYPES, expression, is_float, literal
from .program_walk import (
    ARG_REDUCTIONS,
    INDEX,
    PIECE_LOAD,
    REDUCTIONS,
    needed_refs,
    ref_dtype,
    ref_levels,
)
from .spec import KernelSpec

SCALAR, ROW, FULL = 0, 1, 2
REDUCTION_IDENTITY = {"sum": "0.0", "max": 'float("-inf")', "min": 'float("inf")', "gather": "0"}
_ACC_DTYPE = {"sum": "tl.float32", "max": "tl.float32", "min": "tl.float32", "gather": "tl.int32"}
_FINISH = {"sum": "tl.sum", "gather": "tl.sum"}  # max/min: NAN_EXTREME
# argmax/argmin: the value no element beats, and the reduction that finds the extreme.
ARG_EXTREME = {"argmax": ('float("-inf")', "tl.max"), "argmin": ('float("inf")', "tl.min")}
# max/min over a tile as one reduction that propagates NaN as PyTorch's do (tl.max and tl.min
# drop NaN, which took a second reduction of NaN flags): a combine function per op, emitted
# once before the kernel that uses it (`Emitter.helper_source`).
NAN_EXTREME = {"max": "_max_nan", "min": "_min_nan"}
_HELPERS = {
    name: [
        "@triton.jit",
        f"def {name}(a, b):",
        f"    return tl.{fn}(a, b, propagate_nan=tl.PropagateNan.ALL)",
    ]
    for name, fn in (("_max_nan", "maximum"), ("_min_nan", "minimum"))
}


class Emitter:
    def __init__(
        self,
        spec: KernelSpec,
        coords: Sequence[str],
        col_dims: Sequence[int],
        n_cols: int,
        row_var: str = "row",
        flat_col: str | None = None,
    ) -> None:
        self.spec = spec
        self.row_var = row_var  # a [ROWS, 1] tensor: gives per-row values a pointer of their shape
        self.coords = list(coords)
        self.col_dims = set(col_dims)
        # The template's variable holding the element's row-major index over the column dims
        # (the row templates' `col`): an address walking the row in order is written with it,
        # so Triton sees the contiguity that the coordinates' // and % hide (vector loads).
        self.flat_col = flat_col
        self._col_order = tuple(col_dims)
        self.n_cols = n_cols
        # Row dims a program holds one value of (the row templates' `outer` grid axis): an
        # address in these alone is one scalar pointer, loaded unmasked (its program exists
        # only where it is valid)
        self.scalar_dims: set[int] = set()
        self.lines: list[str] = []
        self.indent = 1
        self.global_memo: dict[Any, str] = {}
        self.local_memo: dict[Any, str] = {}
        self.counter = 0
        self.levels = ref_levels(spec, self._index_level)
        self.helpers: set[str] = set()  # Triton functions the emitted lines call
        # Column loops ("passes") opened so far, the loads of the tile each one read, and the
        # L2 eviction policy of a load in a pass (eviction.py plans it from a first rendering)
        self.pass_loads: list[set[int]] = []
        self.eviction: dict[tuple[int, int], str] = {}

    def begin_pass(self) -> None:
        """A column loop opens: values of the tile computed before are not in its scope."""
        self.pass_loads.append(set())
        self.local_memo = {}

    def helper_source(self) -> list[str]:
        """The lines defining the helpers the kernel calls (before the kernel)."""
        out: list[str] = []
        for name in sorted(self.helpers):
            out += [*_HELPERS[name], "", ""]
        return out

    # -- levels --------------------------------------------------------------------------
    def _index_level(self, index: ix.Index) -> int:
        dims = ix.dims_of(index)
        return FULL if dims & self.col_dims else ROW if dims else SCALAR

    def level(self, ref: Any) -> int:
        return SCALAR if ref[0] == "c" else self.levels[ref]

    def dtype(self, ref: Any) -> str:
        return ref_dtype(self.spec, ref)

    def needed(self) -> set[Any]:
        """Refs the stores depend on."""
        return needed_refs(self.spec)

    # -- statements ----------------------------------------------------------------------
    def line(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    def _name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def mask(self, level: int) -> str | None:
        return {SCALAR: None, ROW: "row_mask", FULL: "mask"}[level]

    def value(self, ref: Any) -> str:
        if ref[0] == "c":
            return literal(ref[1])
        memo = self.local_memo if self.level(ref) == FULL else self.global_memo
        if ref in memo:
            return memo[ref]
        if ref[0] == "L":
            text = self._load(ref[1])
        elif ref[0] == "T":
            text = self._op(ref[1])
        else:
            raise KeyError(f"{ref} must be bound by the template before use")
        name = self._name("x" if ref[0] == "L" else "t")
        self.line(f"{name} = {text}")
        memo[ref] = name
        return name

    def _load(
        self, i: int, coords: Sequence[str] | None = None, mask: str | None = None, within: str = ""
    ) -> str:
        """Load `i` at the tile's coordinates (or at `coords`, under `mask`), `within` a piece's
        range too where given."""
        inp, offset, index = self.spec.loads[i]
        dtype = self.spec.inputs[inp][2]
        where = self.where(index) if coords is None else ix.render(index, list(coords))
        off = f"{offset} + " if offset else ""
        mask = mask if coords is not None else self.mask(self._index_level(index))
        if coords is None and ix.dims_of(index) <= self.scalar_dims:
            mask = None  # one scalar pointer: no block mask may go with it
        if mask and within:
            mask = f"{mask} & {within}"
        args = f"in{inp} + {off}{where}" + (f", mask={mask}, other=0" if mask else "")
        if coords is None and self.pass_loads and self._index_level(index) == FULL:
            self.pass_loads[-1].add(i)
            policy = self.eviction.get((len(self.pass_loads) - 1, i))
            args += f", eviction_policy='{policy}'" if policy else ""
        text = f"tl.load({args})"
        return f"{text}.to(tl.float32)" if dtype in LOW_FLOATS else text

    def where(self, index: ix.Index) -> str:
        """An index at the tile's coordinates: its row part plus `flat_col` where its column
        part is the row-major walk over the column dims, else term by term."""
        if self.flat_col is not None:
            from .cluster_rules import row_of_walk

            row = row_of_walk(self.spec, index, self._col_order)
            if row is not None:
                head = ix.render(row, self.coords) if row else ""
                return f"{head} + {self.flat_col}" if head else self.flat_col
        return ix.render(index, self.coords)

    def _op(self, i: int) -> str:
        op, args, dtype = self.spec.ops[i]
        if op in REDUCTIONS:
            return self.inline_reduction(op, args)
        if op == "cast" and args[0][0] == "c":
            value = args[0][1]
            if dtype == "bool":
                return literal(bool(value))
            return literal(float(value) if is_float(dtype) else int(value))
        if op == PIECE_LOAD and args[0][0] == "L" and self.level(args[0]) == FULL:  # its range
            ranges = [(ix.render(index, self.coords), lo, hi) for index, lo, hi in args[1][1]]
            within = " & ".join(f"({at} >= {lo}) & ({at} < {hi})" for at, lo, hi in ranges)
            return self._load(args[0][1], within=within)
        if op == PIECE_LOAD:  # a value per row (or picked): as is, its address is in bounds
            return self.value(args[0])
        if op == INDEX:  # the element's coordinates through the index expression
            index = args[0][1]
            if not ix.dims_of(index):
                return literal(int(ix.render(index, self.coords)))
            return f"({ix.render(index, self.coords)}).to(tl.int64)"
        rendered = [self.value(a) for a in (args[:1] if op == "cast" else args)]
        return expression(op, rendered, dtype)

    def inline_reduction(self, op: str, args: Sequence[Any]) -> str:
        if op in ARG_REDUCTIONS:
            return self._arg_inline(op, args)
        if self.level(args[0]) != FULL:  # constant along the row
            v = self.value(args[0])
            return f"({v} * {self.n_cols})" if op == "sum" else v
        if self.pickable(op, args):
            return self.picked_gather(args)
        return self.finish(op, self._term(op, args))

    def pickable(self, op: str, args: Sequence[Any]) -> bool:
        """A row gather of an input (gather(load, index, dim)), which `picked_gather` reads
        with one load per row; a gather of a computed value is a masked sum over the row."""
        if op != "gather" or args[0][0] != "L" or self.level(args[0]) != FULL:
            return False
        if args[1][0] != "c" and self.level(args[1]) == FULL:  # one index per row, not per element
            return False
        index = self.spec.loads[args[0][1]][2]
        return ix.dims_of(index) & self.col_dims == {args[2][1]}  # no other column dim

    def picked_gather(self, args: Sequence[Any]) -> str:
        """A row gather of an input: one load per row at the row's index (the masked sum over
        the row is a reduction more). An index outside the row loads nothing and gives 0.0,
        as the masked form does."""
        index, col_dim = self.value(args[1]), args[2][1]
        if self.level(args[1]) == SCALAR:  # one index for every row (MoCo's positives at 0):
            index = f"{index} + {self.row_var} * 0"  # a block, so its bounds mask is one too
        coords = list(self.coords)
        coords[col_dim] = f"({index})"
        ok = f"row_mask & ({index} >= 0) & ({index} < {self.spec.domain[col_dim]})"
        return self._load(args[0][1], coords, ok)

    def _arg_inline(self, op: str, args: Sequence[Any]) -> str:
        """argmax/argmin over a tile that covers the row: the first column holding the extreme,
        or the first NaN's (PyTorch counts NaN as the extreme)."""
        if self.level(args[0]) != FULL:  # constant along the row: its first column
            return f"({self.row_var} * 0).to(tl.int64)"
        v, col, big = self.value(args[0]), self.coords[args[1][1]], self.n_cols
        ext, pick = ARG_EXTREME[op]
        k = self._name("k")
        self.line(f"{k} = {pick}(tl.where(mask & ({v} == {v}), {v}, {ext}), axis=1)[:, None]")
        first = f"tl.min(tl.where(mask & ({v} == {k}), {col}, {big}), axis=1)[:, None]"
        nan = f"tl.min(tl.where(mask & ({v} != {v}), {col}, {big}), axis=1)[:, None]"
        f, n = self._name("f"), self._name("n")
        self.line(f"{f} = {first}")
        self.line(f"{n} = {nan}")
        return f"tl.where({n} < {big}, {n}, {f}).to(tl.int64)"

    def _term(self, op: str, args: Sequence[Any]) -> str:
        """The tile's contribution to a reduction: its valid elements (for a row gather, the one
        whose column is the row's index, as float32 bits), the identity elsewhere. An index
        outside the row picks nothing and gives 0.0, where PyTorch raises or device-asserts:
        kernels are only proved on the in-range indices the validator generates."""
        v = self.value(args[0])
        if op != "gather":
            return f"tl.where(mask, {v}, {REDUCTION_IDENTITY[op]})"
        index, (_, col_dim) = self.value(args[1]), args[2]
        bits = f"{v}.to(tl.int32, bitcast=True)"
        return f"tl.where(mask & ({self.coords[col_dim]} == {index}), {bits}, 0)"

    def accumulator(self, op: str, acc: str) -> str:
        """The statement that starts a column loop's accumulator tile."""
        return f"{acc} = tl.full([ROWS, BLOCK_C], {REDUCTION_IDENTITY[op]}, {_ACC_DTYPE[op]})"

    def accumulate(self, op: str, args: Sequence[Any], acc: str) -> str:
        """The statement that folds this column block into a loop accumulator."""
        term = self._term(op, args)
        if op in ("sum", "gather"):
            return f"{acc} = {acc} + {term}"
        fn = "tl.maximum" if op == "max" else "tl.minimum"  # NaN propagates, as in PyTorch
        return f"{acc} = {fn}({acc}, {term}, propagate_nan=tl.PropagateNan.ALL)"

    def finish(self, op: str, tile: str) -> str:
        """A tile of terms (or an accumulator) reduced to its per-row value (max and min
        propagating NaN)."""
        if op in NAN_EXTREME:
            self.helpers.add(NAN_EXTREME[op])
            return f"tl.reduce({tile}, 1, {NAN_EXTREME[op]})[:, None]"
        text = f"{_FINISH[op]}({tile}, axis=1)[:, None]"
        return f"{text}.to(tl.float32, bitcast=True)" if op == "gather" else text

    def store(self, k: int, ptr: str) -> None:
        ref, offset, index, predicate = self.spec.stores[k]
        dtype = self.spec.outputs[k][2]
        v = self.value(ref)
        off = f"{offset} + " if offset else ""
        level = self._index_level(index)
        mask = self.mask(level)
        where = self.where(index)
        missing = [c for d, c in enumerate(self.coords) if d not in ix.dims_of(index)]
        if self.level(ref) == FULL and missing:
            # the output leaves out a dim of extent 1 (a GEMM's M or N of 1): the pointer is
            # broadcast over the tile, whose mask keeps the one valid row or column
            where, mask = f"{where} + " + " + ".join(f"{c} * 0" for c in missing), "mask"
        elif level == SCALAR and self.level(ref) != SCALAR:
            # a per-row value (the one row of a full reduction) stored to a scalar output
            where, mask = f"{where} + {self.row_var} * 0", "row_mask"
        if predicate:
            picked, value = predicate
            picked_here = f"(({ix.render(picked, self.coords)}) == {value})"
            mask = f"{mask} & {picked_here}" if mask else picked_here
        if dtype == "bool":
            value = f"({v} != 0)"
        elif dtype in LOW_FLOATS or dtype != self.dtype(ref):
            value = f"({v}).to({TL_DTYPES[dtype]})"
        else:
            value = v
        self.line(f"tl.store({ptr} + {off}{where}, {value}" + (f", mask={mask})" if mask else ")"))

    def emit_ready_rows(self, needed: set[Any]) -> None:
        """Emit every needed per-row op whose operands are available outside column loops,
        so loops only read per-row values, never define them."""
        changed = True
        while changed:
            changed = False
            for i, (op, args, _) in enumerate(self.spec.ops):
                ref = ("T", i)
                if ref not in needed or ref in self.global_memo or self.level(ref) == FULL:
                    continue
                if op in REDUCTIONS:
                    continue
                if all(
                    a[0] == "c" or a in self.global_memo or (a[0] == "L" and self.level(a) != FULL)
                    for a in args
                ):
                    self.value(ref)
                    changed = True
