"""The row-resident CUDA C++ template ("row_cluster"): a row program kept on chip.

Owns: rendering a row program (the same loads/ops/stores a "row_reduction" spec holds) as one
CUDA kernel with a `kernelpro-launch` header (runtime/cuda_source.py). CLUSTER CTAs (a
thread-block cluster) share a row; each thread reads its vectors of every input the
reductions need once into registers; each wave of reductions is folded per thread, then across
the warp, the block and the cluster (distributed shared memory); the outputs are computed from
the registers and written with vector stores. Loads only the outputs read are read as they are
written. A pointer that is not aligned for the vector width takes the same body with 1-element
accesses (checked once per CTA). cluster_rules.py says which specs and knobs are legal.
Must not: decide legality (cluster_rules.py), compile or launch (runtime/ does).
"""

from __future__ import annotations

import json
from typing import Any

from . import index as ix
from .cluster_prelude import PRELUDE
from .cluster_rules import (
    REDUCTIONS,
    REGISTER_FILE,
    SPARE_REGISTERS,
    ClusterShape,
    cluster_shape,
    level_of,
    split_index,
)
from .domain import rows_cols
from .optable_cuda import (
    POINTER_TYPES,
    c_expression,
    c_literal,
    c_load_value,
    c_store_value,
    c_type,
)
from .program_walk import needed_refs, reduction_ready, ref_dtype, ref_levels
from .spec import KernelSpec

SCALAR, ROW, FULL = 0, 1, 2
_FUNCTOR = {"sum": "KpSum", "max": "KpMax", "min": "KpMin", "gather": "KpBits"}
_IDENTITY = {
    "sum": "0.0f",
    "max": "__int_as_float(0xff800000)",
    "min": "__int_as_float(0x7f800000)",
}
_IDENTITY["gather"] = "0.0f"


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
        if full:
            if i in self.shape.resident:
                return f"r{i}[k * {self.vec} + j]"
            self.streamed.add(i)
            return f"s{i}[j]"
        inp, offset, index = self.spec.loads[i]
        dtype = self.spec.inputs[inp][2]
        return c_load_value(f"in{inp}[{self._row_offset(offset, index)}]", dtype)

    def _op(self, i: int) -> str:
        op, args, dtype = self.spec.ops[i]
        if op in REDUCTIONS:
            # Constant along the row (per-element ones were folded by a column pass).
            v = self.value(args[0])
            return f"({v} * {float(self.shape.cols)!r}f)" if op == "sum" else v
        if op == "cast" and args[0][0] == "c":
            return c_literal(args[0][1], dtype)
        used = args[:1] if op == "cast" else args
        rendered = [self.value(a) for a in used]
        return c_expression(op, rendered, [self.dtype(a) for a in used], dtype)

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
        size = self.per_thread * self.vec
        for i in self.shape.resident:
            self.line(f"float r{i}[{size}];")
        self.open_vectors()
        for i in self.shape.resident:
            inp, offset, index = self.spec.loads[i]
            ptype = POINTER_TYPES[self.spec.inputs[inp][2]]
            where = self.pointer(f"in{inp}", offset, index)
            self.line(f"kp_load<{ptype}, {self.vec}>({where}, &r{i}[k * {self.vec}]);")
        self.close(2)

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
            self.line(
                f"kp_load<{ptype}, {self.vec}>({self.pointer(f'in{inp}', offset, index)}, s{i});"
            )
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

    def reduce_wave(self, wave: list[int], slots: dict[int, int]) -> None:
        for i in wave:
            self.line(f"float a{i} = {_IDENTITY[self.spec.ops[i][0]]};")
        self.open_vectors()

        def fold() -> None:
            for i in wave:
                op, args, _ = self.spec.ops[i]
                term = self.value(args[0])
                if op == "gather":
                    term = f"(col == {self.value(args[1])} ? {term} : 0.0f)"
                self.line(f"a{i} = {_FUNCTOR[op]}()(a{i}, {term});")

        self.element_block(fold)
        self.close(2)
        nw = self.shape.threads // 32
        for i in wave:
            f, s = _FUNCTOR[self.spec.ops[i][0]], slots[i]
            self.line(
                f"const float red{i} = kp_cluster<{self.shape.cluster}>("
                f"kp_block<{nw}>(a{i}, kp_part[{s}], {f}()), &kp_slot[{s}], {f}());"
            )
            self.row_memo[("T", i)] = f"red{i}"

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
            pending = [i for i in pending if i not in wave]
            self.reduce_wave(wave, slots)
            self.ready_rows(needed)
        if self.shape.cluster > 1:
            self.line("kp_cluster_arrive();  // done reading the other CTAs' slots")
        self.stores(needed)
        return self.lines


def _coords(spec: KernelSpec, rows: tuple[int, ...]) -> list[str]:
    out, stride, strides = [], 1, {}
    for d in reversed(rows):
        strides[d] = stride
        stride *= spec.domain[d]
    for i, d in enumerate(rows):
        text = "row" if strides[d] == 1 else f"(row / {strides[d]})"
        if i > 0:
            text = f"({text} % {spec.domain[d]})"
        out.append(f"  const long long d{d} = {text};")
    return out


def _header(spec: KernelSpec, shape: ClusterShape) -> str:
    outputs = [{"shape": list(s), "stride": list(st), "dtype": dt} for s, st, dt in spec.outputs]
    args = [f"in{i}" for i in range(len(spec.inputs))] + [f"out{i}" for i in range(len(outputs))]
    doc = {
        "outputs": outputs,
        "grid": [shape.rows * shape.cluster],
        "block": [shape.threads],
        "smem": 0,
        "args": args,
    }
    return "/* kernelpro-launch\n" + json.dumps(doc, sort_keys=True) + "\n*/"


def _vector_pointers(spec: KernelSpec, cols: tuple[int, ...]) -> list[tuple[str, int]]:
    """(pointer, bytes per element) of every tensor read or written a vector at a time."""
    out = {}
    for inp, _, idx in spec.loads:
        if level_of(spec, idx, cols) == FULL:
            out[f"in{inp}"] = 4 if spec.inputs[inp][2] == "float32" else 2
    for k, (_, _, idx, _) in enumerate(spec.stores):
        if level_of(spec, idx, cols) == FULL:
            out[f"out{k}"] = 4 if spec.outputs[k][2] == "float32" else 2
    return sorted(out.items())


def _min_blocks(shape: ClusterShape) -> int:
    """CTAs per SM the register estimate allows (at most 2048 threads per SM): the compiler
    must fit that many, so a CTA that could share its SM does not take all its registers."""
    estimate = shape.elements * max(1, len(shape.resident)) + SPARE_REGISTERS
    return max(1, min(2048 // shape.threads, REGISTER_FILE // (shape.threads * estimate)))


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
        _header(spec, shape),
        PRELUDE,
        f'extern "C" __global__ void {attrs}__launch_bounds__({shape.threads}, {_min_blocks(shape)})',
        f"{name}({', '.join(params)}) {{",
        f"  __shared__ float kp_part[{n_red}][{shape.threads // 32}];",
        f"  __shared__ float kp_slot[{n_red}];",
        f"  const int rank = blockIdx.x % {shape.cluster};",
        f"  const long long row = blockIdx.x / {shape.cluster};",
        *_coords(spec, rows),
    ]
    pointers = _vector_pointers(spec, cols) if shape.vec > 1 else []
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
