"""A GEMM whose sizes or strides break 16-byte alignment, as the library's aligned GEMM on
zero-padded operands ("gemm_padded").

cuBLAS runs a bf16/fp16 GEMM whose output row, or an operand's contiguous row, is not a whole
number of 16-byte vectors (an LM head of vocabulary 50257 or 32001: N, or in the backward K and
M) on its unaligned fallback kernel: 3.5x the time of the aligned kernel the same GEMM gets
padded to 50264 (H100, issue 57). This form pads to the alignment and calls the aligned GEMM:
- K, where it is an operand's contiguous dim, is padded with zeros in both operands (exact:
  the padded products add zeros);
- N is padded (the weight's rows of a linear layer: its zero rows; a row-major B's columns) so
  the product's rows are aligned; M where A is column-major (a weight gradient's dY^T);
- an operand is copied (with its padding, keeping its major order, so the library sees the
  same transposes) only where it needs it: a padded dim, an unaligned row pitch, batch stride
  or offset, or no unit stride.
The product's [..M, ..N] corner then runs the spec's elementwise epilogue in torch (the ops in
the dtypes the spec records, as eager runs them on the library's rounded result) and is stored
into outputs of the exact shapes and strides the subgraph has: kernelpro's launch contract
(rewrite/launch.py) promises the reference's strides, so an N-padded result is copied out, and
that copy is part of this candidate's measured time. Padding per call (the weight too) is part
of it as well. The search measures it beside the Triton template (which reads ragged edges
through masks) and the fallback; it wins only where it is faster.

Offered only where something is unaligned (`padded_problem` says why not otherwise), for
16-bit operands, and float32 ones under the tf32 policy (the library's fast float32 GEMM is a
TF32 one; an IEEE float32 GEMM runs on FMA units, where alignment matters little).
Runs behind kernelpro::launch (library calls are not Triton launches; not inlined). An entry
from outside is admitted only through its spec, re-rendered here (tuner/admit.py): as free
source the grammar refuses its torch calls.

Owns: `ALIGN_BYTES`, `PaddedPlan` / `padded_plan(spec)`, `padded_problem(spec)`,
`spec_note(spec)` (the padding, for the search log) and `render_padded(spec)`.
Must not: choose knobs (it has none), read fx, compile or measure.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..gemm_output import dense_output
from ..spec_view import io_names

ENTRY = "entry"
ALIGN_BYTES = 16  # a vector access; cuBLAS's and TMA's alignment for rows and pitches
_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# Epilogue ops as torch expressions, on the library's result (`{0}`, `{1}`: operands).
_UNARY = {
    "neg": "(-{0})", "exp": "torch.exp({0})", "log": "torch.log({0})",
    "sqrt": "torch.sqrt({0})", "rsqrt": "torch.rsqrt({0})", "abs": "torch.abs({0})",
    "erf": "torch.erf({0})", "tanh": "torch.tanh({0})", "sigmoid": "torch.sigmoid({0})",
    "relu": "torch.relu({0})", "reciprocal": "torch.reciprocal({0})", "silu": "F.silu({0})",
    "gelu": "F.gelu({0})", "gelu_tanh": "F.gelu({0}, approximate='tanh')",
}  # fmt: skip
_BINARY = {"add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})"}
_TENSOR_BINARY = {"maximum": "torch.maximum({0}, {1})", "minimum": "torch.minimum({0}, {1})"}


def _align(x: int, elements: int) -> int:
    return -(-x // elements) * elements


def _major(strides: tuple[int, int]) -> str:
    """An operand's layout: "row" (its last dim contiguous), "col" (its first) or "any"."""
    s_row, s_col = strides
    return "row" if s_col == 1 else "col" if s_row == 1 else "any"


@dataclasses.dataclass(frozen=True)
class PaddedPlan:
    """The padded problem: sizes before and after, each operand's layout, which are copied."""

    batch: int
    m: int
    n: int
    k: int
    mp: int
    np: int
    kp: int
    a_major: str
    b_major: str
    copy_a: bool
    copy_b: bool

    @property
    def changes(self) -> bool:
        return (self.mp, self.np, self.kp) != (self.m, self.n, self.k) or self.copy_a or self.copy_b

    def note(self) -> str:
        """What the candidate pads and copies, for logs and the rendered header."""
        dims = [f"{d} {a}->{b}" for d, a, b in (("M", self.m, self.mp), ("N", self.n, self.np),
                ("K", self.k, self.kp)) if a != b]  # fmt: skip
        copies = [x for x, c in (("A", self.copy_a), ("B", self.copy_b)) if c]
        return "pads " + (", ".join(dims) or "nothing") + "; copies " + ("+".join(copies) or "none")


def _aligned(operand: tuple[int, int, tuple[int, int, int]], major: str, rows: int, cols: int,
             batch: int, elements: int) -> bool:  # fmt: skip
    """Whether an operand is usable as it lies: a unit stride, its pitch, batch stride and
    offset, and its contiguous extent, whole vectors."""
    _, offset, (s_batch, s_row, s_col) = operand
    pitch, extent = (s_row, cols) if major == "row" else (s_col, rows)
    values = (pitch, extent, offset) + ((s_batch,) if batch > 1 else ())
    return major != "any" and all(v % elements == 0 for v in values)


def padded_plan(spec: Any) -> PaddedPlan | None:
    """The padded problem of a GEMM spec; None for operands of another dtype."""
    dtype = dict(spec.anchor).get("operand_dtype")
    if dtype not in _BYTES:
        return None
    el = ALIGN_BYTES // _BYTES[dtype]
    batch, m, n, k = (int(spec.param(x)) for x in ("batch", "m", "n", "k"))
    a, b = spec.param("a"), spec.param("b")
    # A copied operand is laid out row-major unless it is column-major already.
    a_major = "row" if _major(a[2][1:]) == "any" else _major(a[2][1:])
    b_major = "row" if _major(b[2][1:]) == "any" else _major(b[2][1:])
    k_inner = a_major == "row" or b_major == "col"
    kp = _align(k, el) if k_inner else k
    np_ = _align(n, el)  # the product's rows, and a row-major B's
    mp = _align(m, el) if a_major == "col" else m
    copy_a = kp != k or mp != m or not _aligned(a, _major(a[2][1:]), m, k, batch, el)
    copy_b = kp != k or np_ != n or not _aligned(b, _major(b[2][1:]), k, n, batch, el)
    return PaddedPlan(batch, m, n, k, mp, np_, kp, a_major, b_major, copy_a, copy_b)


def spec_note(spec: Any) -> str | None:
    """What a spec's candidate does that its knobs do not show (the search log's "note"): a
    padded GEMM's padding and copies; None for other specs."""
    plan = padded_plan(spec) if getattr(spec, "template", None) == "gemm_padded" else None
    return None if plan is None else "gemm_padded: " + plan.note()


def _affine(index: Any) -> bool:
    return all(isinstance(atom, int) for _, atom in index)


def _strides(index: Any, rank: int) -> list[int]:
    """The element strides per domain dim of an affine index (0 where it does not vary)."""
    out = [0] * rank
    for coef, atom in index:
        out[int(atom)] += int(coef)
    return out


def padded_problem(spec: Any) -> str | None:
    """Why `spec` gets no padded candidate, or None where it does."""
    if spec.template not in ("gemm", "gemm_padded"):
        return f"a {spec.template} spec is no GEMM"
    dtype = dict(spec.anchor).get("operand_dtype")
    if dtype == "float32" and spec.precision != "tf32":
        return "a float32 GEMM outside the tf32 policy runs on FMA units: no aligned library kernel"
    plan = padded_plan(spec)
    if plan is None:
        return f"operands of {dtype}: the library's aligned kernels take bf16, fp16, tf32"
    if not plan.changes:
        return "aligned already: the library runs its aligned kernel on it as it lies"
    want = (plan.m, plan.n) if plan.batch == 1 else (plan.batch, plan.m, plan.n)
    if tuple(spec.domain) != want or spec.reduced:
        return "the epilogue reduces rows or has another domain than the product's"
    if any(p for *_, p in spec.stores) or not all(_affine(i) for _, _, i, _ in spec.stores):
        return "a predicated or non-affine store"
    if not all(_affine(i) for _, _, i in spec.loads):
        return "an epilogue load at a non-affine index"
    for name, args, _ in spec.ops:
        consts = [a for a in args if str(a[0]) == "c"]
        if name == "cast" or (name in _UNARY and len(args) == 1 and not consts):
            continue
        if name in _BINARY and len(args) == 2 and len(consts) < 2:
            continue
        if name in _TENSOR_BINARY and len(args) == 2 and not consts:
            continue
        return f"epilogue op {name!r} has no torch form here"
    return None


def _value(ref: Any) -> str:
    kind, v = str(ref[0]), ref[1]
    if kind == "c":
        return repr(float(v)) if isinstance(v, float) else repr(v)
    return {"A": "acc", "L": f"l{v}", "T": f"t{v}"}[kind]


def _epilogue(spec: Any, ins: list[str]) -> list[str]:
    rank = len(spec.domain)
    lines = []
    for i, (src, offset, index) in enumerate(spec.loads):
        strides = _strides(index, rank)
        lines.append(
            f"    l{i} = {ins[src]}.as_strided({list(spec.domain)}, {strides}, "
            f"{ins[src]}.storage_offset() + {offset})"
        )
    for i, (name, args, dtype) in enumerate(spec.ops):
        if name == "cast":
            expr = _value(args[0])
        else:
            table = _UNARY if name in _UNARY else _BINARY if name in _BINARY else _TENSOR_BINARY
            expr = table[name].format(*(_value(a) for a in args))
        lines.append(f"    t{i} = {expr}.to(torch.{dtype})")
    return lines


def _operand(name: str, view: str, major: str, copy: bool, rows: int, cols: int) -> list[str]:
    lines = [f"    {name} = {view}"]
    if copy:
        lines.append(f"    {name} = _pad({name}, {rows}, {cols}, {major!r})")
    return lines


def _stores(spec: Any, plan: PaddedPlan, outs: list[str]) -> list[str]:
    """Each output of the exact shape and strides of the subgraph's: a dense [M, N] output
    whose rows the product holds whole (no N padding) is that value itself (the rows past M
    sliced off: still row after row); others are written through a view of the output as the
    domain (the N-padded product's corner is copied: that copy is part of the time)."""
    if plan.batch == 1 and plan.np == plan.n and dense_output(spec):
        (ref, *_), (shape, _, _) = spec.stores[0], spec.outputs[0]
        value = _value(ref)
        same = tuple(shape) == (plan.m, plan.n)
        return [f"    return [{value if same else f'{value}.reshape({list(shape)})'}]"]
    rank = len(spec.domain)
    lines = []
    for j, ((ref, offset, index, _), (shape, stride, dtype)) in enumerate(
        zip(spec.stores, spec.outputs, strict=True)
    ):
        lines += [
            f"    {outs[j]} = torch.empty_strided({list(shape)}, {list(stride)}, "
            f"dtype=torch.{dtype}, device=device)",
            f"    {outs[j]}.as_strided({list(spec.domain)}, {_strides(index, rank)}, "
            f"{offset}).copy_({_value(ref)})",
        ]
    return [*lines, f"    return [{', '.join(outs)}]"]


_PAD = [
    "def _pad(x, rows, cols, major):",
    "    # a fresh zero-padded [..., rows, cols] copy, in x's major order (the same transposes)",
    "    r, c = x.shape[-2], x.shape[-1]",
    "    if major == 'col':",
    "        return F.pad(x.mT, (0, rows - r, 0, cols - c)).mT",
    "    return F.pad(x, (0, cols - c, 0, rows - r))",
]


def render_padded(spec: Any) -> tuple[str, str]:
    """(Python source, entry name) of the padded library GEMM of a spec `padded_problem`
    accepts."""
    problem = padded_problem(spec)
    plan = padded_plan(spec)
    if problem is not None or plan is None:
        raise ValueError(f"{spec.pattern or spec.template}: no padded GEMM: {problem}")
    ins, outs = io_names(spec)
    batched = plan.batch > 1
    lead = (plan.batch,) if batched else ()

    def view(operand: Any, rows: int, cols: int) -> str:
        src, off, (sb, sr, sc) = operand
        shape, strides = [*lead, rows, cols], [*((sb,) if batched else ()), sr, sc]
        return f"{ins[src]}.as_strided({shape}, {strides}, {ins[src]}.storage_offset() + {off})"

    p = plan
    body = [
        f"def {ENTRY}({', '.join([*ins, '_launch=None'])}):",
        f"    # {p.note()} (aligned to {ALIGN_BYTES} bytes); the library's GEMM on the padded",
        *_operand("a", view(spec.param("a"), p.m, p.k), p.a_major, p.copy_a, p.mp, p.kp),
        *_operand("b", view(spec.param("b"), p.k, p.n), p.b_major, p.copy_b, p.kp, p.np),
        f"    acc = torch.{'bmm' if batched else 'mm'}(a, b)[..., :{p.m}, :{p.n}]",
        *_epilogue(spec, ins),
        "    device = acc.device",
    ]
    body += _stores(spec, plan, outs)
    lines = ["import torch", "import torch.nn.functional as F", "", "", *_PAD, "", "", *body, ""]
    return "\n".join(lines), ENTRY
