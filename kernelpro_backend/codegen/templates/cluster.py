"""The row-resident CUDA C++ template ("row_cluster"): a row program kept on chip.

Owns: rendering a row program (the same loads/ops/stores a "row_reduction" spec holds) as one
CUDA kernel with a `kernelpro-launch` header (runtime/cuda/source.py). CLUSTER CTAs (a
thread-block cluster) share a row; each thread reads its vectors of every input the
reductions need once, into registers, or by cp.async into shared memory (HOLD=shared; split:
its first half of vectors in registers, the rest in shared memory); each wave of reductions is folded per thread, then across
the warp, the block and the cluster (distributed shared memory); with ONLINE=pair a softmax's
max and sum of exp(y - max) fold in one wave (the sum against each thread's own max) and cross
the cluster as one (max, sum) exchange (cluster_waves.py); the outputs are computed from the
held values and written with vector stores. Loads only the outputs read are read as they are
written. A pointer that is not aligned for the vector width takes the same body with 1-element
accesses (checked once per CTA). cluster_rules.py says which specs and knobs are legal.
Must not: decide legality (cluster_rules.py), compile or launch (runtime/ does).
"""

from __future__ import annotations

from typing import Any

from .. import index as ix
from ..cluster_frame import coords, header, min_blocks, vector_pointers
from ..cluster_prelude import PRELUDE
from ..cluster_rules import (
    FLOATS,
    REDUCTIONS,
    ClusterShape,
    cluster_shape,
    flat_columns,
    level_of,
    registers_held,
    split_index,
    walks_row,
)
from ..cluster_waves import pair_wave, reduce_wave
from ..domain import rows_cols
from ..errors import Unsupported
from ..optable_cuda import (
    POINTER_TYPES,
    c_expression,
    c_literal,
    c_load_value,
    c_store_value,
    c_type,
)
from ..program_walk import (
    INDEX,
    PIECE_LOAD,
    needed_refs,
    reduction_ready,
    ref_dtype,
    ref_levels,
)
from ..spec import KernelSpec

SCALAR, ROW, FULL = 0, 1, 2
_APPROX = {"exp": "kp_exp({0})", "div": "kp_div({0}, {1})"}  # cluster_prelude.py


def kernel_name(spec: KernelSpec) -> str:
    return f"kp_row_{spec.digest[:16]}"


class _Body:
    """The statements of one kernel body for vector width `vec` (the knob's, or 1)."""

    def __init__(self, spec: KernelSpec, shape: ClusterShape, vec: int) -> None:
        self.spec, self.shape, self.vec = spec, shape, vec
        self.rows, self.cols = rows_cols(spec)
        self.vectors = shape.cols // vec
        self.cta_vectors = -(-self.vectors // shape.cluster)
        self.per_thread = -(-self.cta_vectors // shape.threads)
        self.kr = registers_held(shape.hold, self.per_thread)  # vectors held in registers
        self.lines: list[str] = []
        self.indent = 2
        self.row_memo: dict[Any, str] = {}
        self.elem_memo: dict[Any, str] = {}
        self.streamed: set[int] = set()
        self.counter = 0
        self.levels = ref_levels(spec, lambda idx: level_of(spec, idx, self.cols))

    def level(self, ref: Any) -> int:
        return SCALAR if ref[0] == "c" else self.levels[ref]

    def dtype(self, ref: Any) -> str:
        constant = "bool" if ref[0] == "c" and isinstance(ref[1], bool) else "float32"
        return ref_dtype(self.spec, ref, constant)  # C converts int literals

    def line(self, text: str) -> None:
        self.lines.append("  " * self.indent + text)

    def _name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def _row_offset(self, offset: int, index: Any) -> str:
        parts = split_index(index, self.rows, self.cols)
        assert parts is not None, "cluster_rules admits only row/column-separable indices"
        names = [f"d{k}" for k in range(len(self.spec.domain))]
        row = ix.render(parts[0], names).replace("//", "/")
        return f"{offset} + {row}" if offset else row

    # -- values ---------------------------------------------------------------------------
    def value(self, ref: Any) -> str:
        if ref[0] == "c":
            return c_literal(ref[1])
        full = self.level(ref) == FULL
        memo = self.elem_memo if full else self.row_memo
        if ref in memo:
            return memo[ref]
        if ref[0] == "L":
            text = self._load(ref[1], full)
        else:
            text = self._op(ref[1])
        if full and ref[0] == "L":
            memo[ref] = text  # a register or vector element: no copy
            return text
        name = self._name("x" if ref[0] == "L" else "t")
        self.line(f"const {c_type(self.dtype(ref))} {name} = {text};")
        memo[ref] = name
        return name

    def _load(self, i: int, full: bool) -> str:
        inp, offset, index = self.spec.loads[i]
        dtype = self.spec.inputs[inp][2]
        if full and (dtype not in FLOATS or not walks_row(self.spec, index, self.cols)):
            # an integer row, or values that repeat along it: one element at a time
            where = f"{self._row_offset(offset, index) or 0} + {self._column(index)}"
            return c_load_value(f"in{inp}[{where}]", dtype)
        if full:
            held = i in self.shape.resident
            if held and self.kr == self.per_thread:
                return f"r{i}[k * {self.vec} + j]"
            self.streamed.add(i)
            if held and self.kr:  # HOLD=split: k is a constant in the unrolled loop
                return f"(k < {self.kr} ? r{i}[k * {self.vec} + j] : s{i}[j])"
            return f"s{i}[j]"
        return c_load_value(f"in{inp}[{self._row_offset(offset, index)}]", dtype)

    def _op(self, i: int) -> str:
        op, args, dtype = self.spec.ops[i]
        if op == INDEX:
            return self._index(args[0][1])
        if op == PIECE_LOAD:  # its address is in bounds everywhere: read as the plain load
            return self.value(args[0])
        if op in REDUCTIONS:
            # Constant along the row (per-element ones were folded by a column pass).
            v = self.value(args[0])
            return f"({v} * {float(self.shape.cols)!r}f)" if op == "sum" else v
        if op == "cast" and args[0][0] == "c":
            return c_literal(args[0][1], dtype)
        used = args[:1] if op == "cast" else args
        rendered = [self.value(a) for a in used]
        types = [self.dtype(a) for a in used]
        if op in _APPROX and all(c_type(t) == "float" for t in types):
            return _APPROX[op].format(*rendered)  # the Triton templates' precision
        return c_expression(op, rendered, types, dtype)

    def _column(self, index: Any) -> str:
        """An index's column part at the element: `col` where it walks the row in order, else
        from the element's coordinates along the column dims (row-major in `col`)."""
        _, col = split_index(index, self.rows, self.cols)
        if col == flat_columns(self.spec, self.cols):
            return "col"
        names = [f"d{k}" for k in range(len(self.spec.domain))]
        inner = 1
        for d in reversed(self.cols):
            extent = self.spec.domain[d]
            names[d] = "0LL" if extent == 1 else f"((col / {inner}LL) % {extent}LL)"
            inner *= extent
        return f"({ix.render(col, names)})"

    def _index(self, index: Any) -> str:
        """An index expression's value at the element: its row part from the row's coordinates,
        its column part `col` (the row-major column walk) or none."""
        row, col = split_index(index, self.rows, self.cols)
        if col and col != flat_columns(self.spec, self.cols):
            raise Unsupported("an index that walks the row's columns other than in order")
        names = [f"d{k}" for k in range(len(self.spec.domain))]
        terms = [f"(long long)({ix.render(row, names)})"] if row else []
        return " + ".join(terms + (["col"] if col else [])) or "0LL"

    # -- loops ----------------------------------------------------------------------------
    def open_vectors(self) -> None:
        """`for k`: this thread's vectors of the CTA's share of the row; `c0` its first column."""
        self.line("#pragma unroll")
        self.line(f"for (int k = 0; k < {self.per_thread}; ++k) {{")
        self.indent += 1
        self.line(f"const long long q = (long long)k * {self.shape.threads} + threadIdx.x;")
        self.line(f"if (q < {self.cta_vectors} && vbase + q < {self.vectors}) {{")
        self.indent += 1
        self.line(f"const long long c0 = (vbase + q) * {self.vec};")

    def open_elements(self) -> None:
        self.line("#pragma unroll")
        self.line(f"for (int j = 0; j < {self.vec}; ++j) {{")
        self.indent += 1
        self.line("const long long col = c0 + j;")
        self.elem_memo = {}

    def close(self, levels: int) -> None:
        for _ in range(levels):
            self.indent -= 1
            self.line("}")

    def pointer(self, tensor: str, offset: int, index: Any) -> str:
        return f"{tensor} + {self._row_offset(offset, index)} + c0"

    def resident_loads(self) -> None:
        """Read each resident input once: a thread's first `kr` vectors into registers, the
        rest (HOLD=shared or split) to shared memory by cp.async, each thread its own vectors
        (read back from there by the same thread, so its own wait suffices)."""
        kr, spill = self.kr, self.kr < self.per_thread
        if kr:
            for i in self.shape.resident:
                self.line(f"float r{i}[{kr * self.vec}];")
        if spill:
            offsets, _ = self.shape.shared_offsets()
            for i, offset in zip(self.shape.resident, offsets, strict=True):
                ptype = POINTER_TYPES[self.spec.inputs[self.spec.loads[i][0]][2]]
                self.line(f"{ptype}* sm{i} = reinterpret_cast<{ptype}*>(kp_smem + {offset});")
        self.open_vectors()
        for n, i in enumerate(self.shape.resident):
            inp, offset, index = self.spec.loads[i]
            ptype = POINTER_TYPES[self.spec.inputs[inp][2]]
            where = self.pointer(f"in{inp}", offset, index)
            size = self.vec * self.shape.resident_sizes[n]
            to_registers = f"kp_load<{ptype}, {self.vec}>({where}, &r{i}[k * {self.vec}]);"
            to_shared = f"kp_cp_async<{size}>({self.shared_vector(i)}, {where});"
            if not spill:
                self.line(to_registers)
            elif not kr:
                self.line(to_shared)
            else:
                self.line(f"if (k < {kr}) {to_registers} else {to_shared}")
        self.close(2)
        if spill:
            self.line("kp_cp_async_wait();")

    def shared_vector(self, i: int) -> str:
        """This thread's vector `q` of resident load `i` in shared memory (past its first `kr`)."""
        first = self.kr * self.shape.threads
        return f"sm{i} + (q - {first}) * {self.vec}" if first else f"sm{i} + q * {self.vec}"

    def source_of(self, i: int) -> str:
        """Where a streamed load's vector is read: shared memory (a resident load held there)
        or global memory."""
        if i in self.shape.resident:
            return self.shared_vector(i)
        inp, offset, index = self.spec.loads[i]
        return self.pointer(f"in{inp}", offset, index)

    def element_block(self, emit: Any) -> None:
        """Open the element loop and run `emit`; loads it streams are read before the loop."""
        saved, self.lines = self.lines, []
        self.indent += 1
        before = set(self.streamed)
        self.open_elements()
        emit()
        self.close(1)
        self.indent -= 1
        inner, self.lines = self.lines, saved
        for i in sorted(self.streamed - before):
            inp, offset, index = self.spec.loads[i]
            ptype = POINTER_TYPES[self.spec.inputs[inp][2]]
            self.line(f"float s{i}[{self.vec}];")
            load = f"kp_load<{ptype}, {self.vec}>({self.source_of(i)}, s{i});"
            split = i in self.shape.resident and self.kr
            self.line(f"if (k >= {self.kr}) {load}" if split else load)
        self.lines += inner
        self.streamed = before

    # -- program --------------------------------------------------------------------------
    def ready_rows(self, needed: set[Any]) -> None:
        """Every needed per-row value whose operands are known, at the body's scope."""
        changed = True
        while changed:
            changed = False
            for ref in sorted(needed, key=lambda r: (r[0], r[1])):
                if ref in self.row_memo or self.level(ref) == FULL or ref[0] == "c":
                    continue
                if ref[0] == "T" and self.spec.ops[ref[1]][0] in REDUCTIONS:
                    arg = self.spec.ops[ref[1]][1][0]
                    if self.level(arg) == FULL or not self._known(arg):
                        continue
                elif ref[0] == "T" and not all(self._known(a) for a in self.spec.ops[ref[1]][1]):
                    continue
                self.value(ref)
                changed = True

    def _known(self, ref: Any) -> bool:
        return ref[0] == "c" or ref in self.row_memo or (ref[0] == "L" and self.level(ref) != FULL)

    def stores(self, needed: set[Any]) -> None:
        full = [
            k for k, (_, _, idx, _) in enumerate(self.spec.stores)
            if level_of(self.spec, idx, self.cols) == FULL
        ]  # fmt: skip
        if full:
            self.open_vectors()
            for k in full:
                self.line(f"float o{k}[{self.vec}];")

            def compute() -> None:
                for k in full:
                    ref = self.spec.stores[k][0]
                    self.line(f"o{k}[j] = (float)({self.value(ref)});")

            self.element_block(compute)
            for k in full:
                _, offset, index, _ = self.spec.stores[k]
                ptype = POINTER_TYPES[self.spec.outputs[k][2]]
                where = self.pointer(f"out{k}", offset, index)
                self.line(f"kp_store<{ptype}, {self.vec}>({where}, o{k});")
            self.close(2)
        for k, (ref, offset, index, predicate) in enumerate(self.spec.stores):
            if k in full:
                continue
            cond = "rank == 0 && threadIdx.x == 0"
            if predicate:
                picked, want = predicate
                cond += f" && ({self._row_offset(0, picked)}) == {want}"
            dtype = self.spec.outputs[k][2]
            value = c_store_value(self.value(ref), self.dtype(ref), dtype)
            self.line(f"if ({cond}) out{k}[{self._row_offset(offset, index)}] = {value};")

    def program(self) -> list[str]:
        needed = needed_refs(self.spec)
        self.line(f"const long long vbase = (long long)rank * {self.cta_vectors};")
        if self.shape.resident:
            self.resident_loads()
        self.ready_rows(needed)
        looped = [
            i for i, (op, args, _) in enumerate(self.spec.ops)
            if op in REDUCTIONS and ("T", i) in needed and self.level(args[0]) == FULL
        ]  # fmt: skip
        slots = {i: s for s, i in enumerate(looped)}
        pending = list(looped)
        while pending:
            wave = [
                i for i in pending
                if reduction_ready(self.spec, self.spec.ops[i][1], self.row_memo, self.level)
            ]  # fmt: skip
            if not wave:
                raise AssertionError(f"reductions {pending} wait on values no pass computes")
            paired = pair_wave(self, wave, pending)
            wave += list(paired.values())
            pending = [i for i in pending if i not in wave]
            reduce_wave(self, wave, slots, paired)
            self.ready_rows(needed)
        if self.shape.cluster > 1:
            self.line("kp_cluster_arrive();  // done reading the other CTAs' slots")
        self.stores(needed)
        return self.lines


def render_cluster(spec: KernelSpec) -> tuple[str, str]:
    """(CUDA source with its launch header, kernel name)."""
    shape = cluster_shape(spec, dict(spec.knobs))
    rows, cols = rows_cols(spec)
    name = kernel_name(spec)
    params = [
        f"const {POINTER_TYPES[dt]}* __restrict__ in{i}" for i, (_, _, dt) in enumerate(spec.inputs)
    ] + [f"{POINTER_TYPES[dt]}* __restrict__ out{i}" for i, (_, _, dt) in enumerate(spec.outputs)]
    n_red = max(1, sum(1 for op, _, _ in spec.ops if op in REDUCTIONS))
    attrs = f"__cluster_dims__({shape.cluster}, 1, 1) " if shape.cluster > 1 else ""
    lines = [
        header(spec, shape),
        PRELUDE,
        f'extern "C" __global__ void {attrs}__launch_bounds__({shape.threads}, {min_blocks(shape)})',
        f"{name}({', '.join(params)}) {{",
        f"  __shared__ float kp_part[{n_red}][{shape.threads // 32}];",
        f"  __shared__ float kp_slot[{n_red}];",
        *(
            ["  extern __shared__ __align__(16) unsigned char kp_smem[];"]
            if shape.hold != "registers"
            else []
        ),
        f"  const int rank = blockIdx.x % {shape.cluster};",
        f"  const long long row = blockIdx.x / {shape.cluster};",
        *coords(spec, rows),
    ]
    pointers = vector_pointers(spec, cols) if shape.vec > 1 else []
    bodies = [_Body(spec, shape, shape.vec).program()]
    if pointers:
        checks = " && ".join(
            f"reinterpret_cast<unsigned long long>({p}) % {shape.vec * size} == 0"
            for p, size in pointers
        )
        bodies.append(_Body(spec, shape, 1).program())
        lines += [f"  if ({checks}) {{", *bodies[0], "  } else {", *bodies[1], "  }"]
    else:
        lines += ["  {", *bodies[0], "  }"]
    if shape.cluster > 1:
        lines.append("  kp_cluster_wait();  // no CTA leaves while others may read its slots")
    lines.append("}")
    return "\n".join(lines) + "\n", name
