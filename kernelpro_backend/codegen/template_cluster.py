"""The row-resident CUDA C++ template ("row_cluster"): a row program kept on chip.

Owns: rendering a row program (the same loads/ops/stores a "row_reduction" spec holds) as one
CUDA kernel with a `kernelpro-launch` header (runtime/cuda_source.py). CLUSTER CTAs (a
thread-block cluster) share a row; each thread reads its vectors of every input the
reductions need once into registers; each wave of reductions is folded per thread, then across
the warp, the block and the cluster (distributed shared memory); with ONLINE=pair a softmax's
max and sum of exp(y - max) fold in one wave (the sum against each thread's own max) and cross
the cluster as one (max, sum) exchange; the outputs are computed from
the registers and written with vector stores. Loads only the outputs read are read as they are
written. A pointer that is not aligned for the vector width takes the same body with 1-element
accesses (checked once per CTA). cluster_rules.py says which specs and knobs are legal.
Must not: decide legality (cluster_rules.py), compile or launch (runtime/ does).
"""

from __future__ import annotations

from typing import Any

from . import index as ix
from .cluster_frame import coords, header, min_blocks, vector_pointers
from .cluster_prelude import PRELUDE
from .cluster_rules import (
    REDUCTIONS,
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
from .program_walk import needed_refs, online_pairs, reduction_ready, ref_dtype, ref_levels
from .spec import KernelSpec

SCALAR, ROW, FULL = 0, 1, 2
_FUNCTOR = {"sum": "KpSum", "max": "KpMax", "min": "KpMin", "gather": "KpBits"}
_IDENTITY = {
    "sum": "0.0f",
    "max": "__int_as_float(0xff800000)",
    "min": "__int_as_float(0x7f800000)",
}
_IDENTITY["gather"] = "0.0f"
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
            if i in self.shape.resident and self.shape.hold == "registers":
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
        types = [self.dtype(a) for a in used]
        if op in _APPROX and all(c_type(t) == "float" for t in types):
            return _APPROX[op].format(*rendered)  # the Triton templates' precision
        return c_expression(op, rendered, types, dtype)

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
        if self.shape.hold == "shared":
            return self.shared_loads()
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

    def shared_loads(self) -> None:
        """HOLD=shared: copy the CTA's share of each resident input to shared memory, each
        thread its own vectors (read back from there by the same thread)."""
        offsets, _ = self.shape.shared_offsets()
        for i, offset in zip(self.shape.resident, offsets, strict=True):
            ptype = POINTER_TYPES[self.spec.inputs[self.spec.loads[i][0]][2]]
            self.line(f"{ptype}* sm{i} = reinterpret_cast<{ptype}*>(kp_smem + {offset});")
        self.open_vectors()
        for i in self.shape.resident:
            inp, offset, index = self.spec.loads[i]
            size = self.vec * self.shape.resident_sizes[self.shape.resident.index(i)]
            where = self.pointer(f"in{inp}", offset, index)
            self.line(f"kp_cp_async<{size}>(sm{i} + q * {self.vec}, {where});")
        self.close(2)
        self.line("kp_cp_async_wait();")

    def source_of(self, i: int) -> str:
        """Where a streamed load's vector is read: shared memory (HOLD=shared) or global."""
        if i in self.shape.resident and self.shape.hold == "shared":
            return f"sm{i} + q * {self.vec}"
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
            self.line(f"kp_load<{ptype}, {self.vec}>({self.source_of(i)}, s{i});")
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

    def reduce_wave(
        self, wave: list[int], slots: dict[int, int], paired: dict[int, int] | None = None
    ) -> None:
        """Fold `wave`'s reductions over this thread's values, then warp -> block -> cluster.
        `paired` (max -> sum of exp(y - max), both in `wave`): the sum is folded in a second
        register pass against the thread's own max, and each pair crosses the cluster as one
        (max, sum) exchange: one barrier where two waves take two."""
        paired = paired or {}
        partners = set(paired.values())
        for i in wave:
            self.line(f"float a{i} = {_IDENTITY[self.spec.ops[i][0]]};")

        def fold(ops: list[int]) -> None:
            for i in ops:
                op, args, _ = self.spec.ops[i]
                term = self.value(args[0])
                if op == "gather":
                    term = f"(col == {self.value(args[1])} ? {term} : 0.0f)"
                self.line(f"a{i} = {_FUNCTOR[op]}()(a{i}, {term});")

        self.open_vectors()
        self.element_block(lambda: fold([i for i in wave if i not in partners]))
        self.close(2)
        if paired:
            for m in paired:  # exp(y - max) against the thread's max; none at all: 0
                self.line(f"const float b{m} = (a{m} == {_IDENTITY['max']}) ? 0.0f : a{m};")
                self.row_memo[("T", m)] = f"b{m}"
            self.open_vectors()
            self.element_block(lambda: fold(sorted(partners)))
            self.close(2)
            for m in paired:
                del self.row_memo[("T", m)]
        nw = self.shape.threads // 32
        for i in wave:
            if i in partners:
                continue
            if i in paired:
                s, sm, ss = paired[i], slots[i], slots[paired[i]]
                self.line(
                    f"const KpPair red{i} = kp_cluster_pair<{self.shape.cluster}>("
                    f"kp_block_pair<{nw}>(KpPair{{a{i}, a{s}}}, kp_part[{sm}], kp_part[{ss}]), "
                    f"&kp_slot[{sm}], &kp_slot[{ss}]);"
                )
                self.row_memo[("T", i)], self.row_memo[("T", s)] = f"red{i}.m", f"red{i}.s"
                continue
            f, s = _FUNCTOR[self.spec.ops[i][0]], slots[i]
            self.line(
                f"const float red{i} = kp_cluster<{self.shape.cluster}>("
                f"kp_block<{nw}>(a{i}, kp_part[{s}], {f}()), &kp_slot[{s}], {f}());"
            )
            self.row_memo[("T", i)] = f"red{i}"

    def pair_wave(self, wave: list[int], pending: list[int]) -> dict[int, int]:
        """The max reductions of `wave` whose sum of exp(y - max) (still pending) can fold
        in the same wave: with ONLINE=pair, every pair whose other per-row operands are known."""
        if self.spec.knob("ONLINE") != "pair":
            return {}
        out = {}
        for m, s in online_pairs(self.spec, [*wave, *pending]).items():
            known = {*self.row_memo, ("T", m)}
            if (
                m in wave
                and s in pending
                and reduction_ready(self.spec, self.spec.ops[s][1], known, self.level)
            ):
                out[m] = s
        return out

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
            paired = self.pair_wave(wave, pending)
            wave += list(paired.values())
            pending = [i for i in pending if i not in wave]
            self.reduce_wave(wave, slots, paired)
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
            if shape.hold == "shared"
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
