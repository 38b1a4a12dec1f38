"""Which GEMM specs the CUTLASS 3 kernel computes ("gemm_cutlass"), its knobs, and the module
that calls it.

A "gemm" spec maps to templates/cutlass.CutlassGemm when it is one 2-D 16-bit GEMM whose output
is `act(A @ B (+ bias[n]))` or `A @ B (+ bias[n]) + C[m, n]` — act one of CUTLASS's (ReLU, erf
or tanh GELU, SiLU, sigmoid, recognised by value: epilogue_eval.py), else any run of elementwise
ops the evaluator knows, compiled into the kernel as a functor (`c_body`) — with the output the
[M, N] result row after row (a contiguous [M, N], or a linear layer's [B, T, N]:
gemm_output.dense_output), A [M, K] with K or M contiguous and B [K, N] with K or N
contiguous (the forward's x @ W^T and the backward's dy @ W and dy^T @ x alike), contiguous
extents and the other strides multiples of 8 elements (16-byte TMA rows). The knobs pick the
schedule, the tile's N and the cluster's M; the tile's M and K stay 128 and 64 (the shapes that
won on the H100, BENCHMARKS.md).

The rendered module embeds the CUDA C++ source and calls it through the custom op
`kernelpro::cutlass_gemm` (ops/cutlass_gemm.py: a shared library built by nvcc, loaded with
ctypes), which traces into Inductor's graph as one node.

Owns: `cutlass_problem(spec)` (why a spec cannot be this GEMM, or None), `cutlass_gemm(spec)`
(its `CutlassGemm`), `cutlass_specs(seed)` (the seed as every legal configuration), `c_body`,
`render_cutlass(spec)` and `host_surcharge_ms` (its host path's cost in the winner's margin).
Must not: compile, load or launch (runtime/cuda/host.py), or decide which configurations are
built before a search (tuner/cutlass_builds.py).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

from .epilogue_eval import activation_of, is_function_of, unary_run
from .gemm_output import dense_output, view_as_output
from .optable_cuda import c_cast, c_expression, c_literal
from .spec_view import io_names
from .templates.cutlass import ACTIVATIONS, CUTLASS_TEMPLATES, DTYPES, CutlassGemm

ENTRY = "entry"
# The knobs (knobs.py takes them from here): ping-pong or cooperative warp groups (the latter
# also under the stream-K tile scheduler), the tile's N, CTAs per cluster along M.
SPACE: dict[str, tuple[Any, ...]] = {
    "SCHEDULE": ("pingpong", "cooperative", "stream_k"),
    "TILE_N": (128, 256),
    "CLUSTER_M": (1, 2),
}
DEFAULT = (("CLUSTER_M", 1), ("SCHEDULE", "pingpong"), ("TILE_N", 128))
_ALIGN = 8  # elements of a 16-byte row: TMA's and CUTLASS's alignment for 16-bit operands
# Host time of one call through the generated module (views, the custom op's dispatch, the
# ctypes call), and its excess over a Triton launch's: 49.5 and 26 µs on the H100 machine
# (scripts/gpu_cutlass_host_cost.py, BENCHMARKS.md).
HOST_US, EXTRA_HOST_US = 50.0, 26.0


def host_surcharge_ms(spec: Any, gpu_ms: float) -> float:
    """What a kernel must save beyond the launch path's minimum gain for its slower host path:
    a CUTLASS call shorter on the GPU than on the host can make a step wait for the host by
    the excess; a longer one hides it behind its own GPU time."""
    if getattr(spec, "template", None) not in CUTLASS_TEMPLATES or gpu_ms * 1e3 >= HOST_US:
        return 0.0
    return EXTRA_HOST_US / 1e3


@dataclasses.dataclass(frozen=True)
class Operands:
    """Where the GEMM's operands are: (input, element offset, row stride) each; None where
    the epilogue has no such term."""

    a: tuple[int, int, int]  # (input, offset, the stride of A's dim that is not contiguous)
    b: tuple[int, int, int]
    bias: tuple[int, int] | None
    c: tuple[int, int, int] | None
    activation: str
    out_stride: int
    body: str = ""  # the C++ of a "custom" activation
    a_major: str = "k"  # A's contiguous dim: "k" or "m"
    b_major: str = "k"  # B's: "k" or "n"


def _ref(arg: Any) -> tuple[str, Any]:
    return (str(arg[0]), arg[1])


def _per_column(loads: Sequence[Any], ref: tuple[str, int]) -> bool:
    return ref[0] == "L" and [tuple(i) for i in loads[ref[1]][2]] == [(1, 1)]


def _per_element(loads: Sequence[Any], ref: tuple[str, int], m: int) -> bool:
    """A load of one element per output element, rows contiguous (a one-row GEMM's is one
    row: its index names no row)."""
    index = [tuple(i) for i in loads[ref[1]][2]] if ref[0] == "L" else []
    if m == 1 and index == [(1, 1)]:
        return True
    return len(index) == 2 and index[1] == (1, 1) and index[0][1] == 0


def _add_of(op: Any, value: tuple[str, int]) -> tuple[str, int] | None:
    """The other operand of `op` when it is `value + something`."""
    name, args, _ = op
    refs = [_ref(a) for a in args]
    if name != "add" or len(refs) != 2 or value not in refs:
        return None
    return refs[1] if refs[0] == value else refs[0]


def _epilogue(spec: Any) -> tuple[str, int | None, int | None, str] | str:
    """(activation, bias load, residual load, C++ body of a "custom" activation) of the spec's
    ops, or why it is not one: an optional bias per column, a run of elementwise ops — one of
    CUTLASS's activations (epilogue_eval.py), else the ops themselves compiled into a functor —
    an optional residual and a last run that is the identity (casts)."""
    ops, loads = list(spec.ops), list(spec.loads)
    value, bias, residual, i = ("A", 0), None, None, 0
    if ops and (other := _add_of(ops[0], value)) is not None and _per_column(loads, other):
        bias, value, i = other[1], ("T", 0), 1
    end = unary_run(ops, i, value)
    activation, body = activation_of(ops, i, end, value), ""
    if activation is None and is_function_of(ops, i, end, value):
        activation, body = (
            "custom",
            c_body(ops, i, end, value, str(dict(spec.anchor)["operand_dtype"])),
        )
    if activation is None or activation not in ACTIVATIONS:
        return "the epilogue is not a bias, elementwise ops and a residual"
    value = ("T", end - 1) if end > i else value
    if end < len(ops):
        other = _add_of(ops[end], value)
        if other is None or not _per_element(loads, other, int(spec.param("m"))):
            return f"epilogue op {ops[end][0]!r} is not a residual added last"
        if activation != "identity":
            return "an activation before the residual (CUTLASS adds C before it)"
        residual, value = other[1], ("T", end)
        last = unary_run(ops, end + 1, value)
        if last != len(ops) or activation_of(ops, end + 1, last, value) != "identity":
            return "ops after the residual"
        value = ("T", last - 1) if last > end + 1 else value
    if len(spec.stores) != 1:
        return "more than one output"
    ref, _, _, _ = spec.stores[0]
    if _ref(ref) != value:
        return "the output is not the epilogue's last value"
    return activation, bias, residual, body


def c_body(ops: Sequence[Any], first: int, end: int, value: tuple[str, Any], dtype: str) -> str:
    """C++ statements computing `float y` from `float x` (acc + bias) as ops[first:end] do,
    x first rounded as the GEMM's output is (to `dtype`), every cast as the subgraph's."""

    def operand(arg: Any) -> tuple[str, str]:  # (C expression, its dtype)
        kind, v = _ref(arg)
        if (kind, v) == value:
            return "xr", "float32"
        if kind == "T":
            return f"t{v}", str(ops[int(v)][2])
        return c_literal(v, "float32"), "float32"

    lines = [f"float xr = {c_cast('x', 'float32', dtype)};"]
    for k in range(first, end):
        name, args, out = ops[k]
        if name == "cast":
            text, src = operand(args[0])
            expr = c_cast(text, src, str(out))
        else:
            rendered = [operand(a) for a in args]
            expr = c_expression(name, [r[0] for r in rendered], [r[1] for r in rendered], str(out))
        lines.append(f"auto t{k} = {expr};")
    return " ".join([*lines, f"float y = (float)(t{end - 1});"])


def _operands(spec: Any) -> Operands | str:
    found = _epilogue(spec)
    if isinstance(found, str):
        return found
    activation, bias, residual, body = found
    a_in, a_off, (_, sam, sak) = spec.param("a")
    b_in, b_off, (_, sbk, sbn) = spec.param("b")
    # K contiguous first (the forward's operands), else M / N (the backward's transposes)
    a_major = "k" if sak == 1 else "m" if sam == 1 else None
    b_major = "k" if sbk == 1 else "n" if sbn == 1 else None
    if a_major is None or b_major is None:
        return "A needs K or M contiguous and B K or N contiguous"
    if not dense_output(spec):
        return "the output is not the [M, N] result row after row (a contiguous [M, N] or [..., N])"
    bias_at = None if bias is None else (spec.loads[bias][0], spec.loads[bias][1])
    c_at = None
    if residual is not None:
        c_in, c_off, index = spec.loads[residual]
        rows = tuple(index)[0][0] if len(index) == 2 else spec.param("n")  # one row: any
        c_at = (c_in, c_off, rows)
    return Operands(
        (a_in, a_off, sam if a_major == "k" else sak),
        (b_in, b_off, sbn if b_major == "k" else sbk),
        bias_at,
        c_at,
        activation,
        spec.param("n"),
        body,
        a_major,
        b_major,
    )


def cutlass_problem(spec: Any) -> str | None:
    """Why `spec` cannot run as the CUTLASS GEMM, or None when it can."""
    if spec.template not in ("gemm", "gemm_cutlass") or spec.param("batch") != 1:
        return "not a 2-D GEMM"
    why = _unbuilt(dict(spec.knobs) if spec.template == "gemm_cutlass" else {})
    if why:
        return why
    dtype = dict(spec.anchor).get("operand_dtype")
    if dtype not in DTYPES or spec.precision == "tf32x3":
        return f"operands of {dtype}: the CUTLASS GEMM takes {sorted(DTYPES)}"
    if any(dt != dtype for _, _, dt in (*spec.inputs, *spec.outputs)):
        return "inputs and output of other dtypes than the operands"
    found = _operands(spec)
    if isinstance(found, str):
        return found
    sizes = [spec.param("k"), spec.param("n"), found.a[2], found.b[2], found.out_stride]
    if found.a_major == "m":
        sizes.append(spec.param("m"))  # A's contiguous extent
    offsets = [found.a[1], found.b[1], *(t[1] for t in (found.bias, found.c) if t)]
    if found.c is not None:
        sizes.append(found.c[2])
    if any(v % _ALIGN for v in sizes + offsets):
        return f"contiguous extents, strides and offsets must be multiples of {_ALIGN} elements"
    return None


def _unbuilt(knobs: dict[str, Any]) -> str | None:
    """Why a configuration of the knobs is not built, or None."""
    if knobs.get("SCHEDULE") == "pingpong" and knobs.get("TILE_N") == 256:
        # each ping-pong warp group holds a whole 128x256 float32 tile: it spills (1.8 ms
        # where 128x128 took 0.14 on the H100, BENCHMARKS.md); cooperative splits it
        return "ping-pong with a 128x256 tile spills: use cooperative, or TILE_N=128"
    if knobs.get("SCHEDULE") == "stream_k" and knobs.get("CLUSTER_M") == 2:
        # each configuration is a library of its own (1-3 minutes of nvcc before a search can
        # measure it): stream-K, for the partial last wave, is built with one-CTA clusters only
        return "stream-K is built with CLUSTER_M=1 only (a library per configuration)"
    return None


def cutlass_gemm(spec: Any) -> CutlassGemm:
    """The CUTLASS configuration of a legal "gemm_cutlass" spec."""
    found = _operands(spec)
    assert not isinstance(found, str), found
    knobs = dict(spec.knobs) or dict(DEFAULT)
    return CutlassGemm(
        dtype=str(dict(spec.anchor)["operand_dtype"]),
        activation=found.activation,
        bias=found.bias is not None,
        source=found.c is not None,
        tile=(128, int(knobs["TILE_N"]), 64),
        cluster=(int(knobs["CLUSTER_M"]), 1),
        schedule=str(knobs["SCHEDULE"]),
        activation_body=found.body,
        a_major=found.a_major,
        b_major=found.b_major,
    )


def cutlass_specs(seed: Any) -> list[Any]:
    """The seed as a "gemm_cutlass" spec in every configuration of its knobs (the default
    first); [] when the CUTLASS GEMM cannot compute it."""
    if cutlass_problem(seed) is not None:
        return []
    combos = [dict(zip(SPACE, v, strict=True)) for v in itertools.product(*SPACE.values())]
    combos = [k for k in combos if _unbuilt(k) is None]
    combos.sort(key=lambda k: tuple(sorted(k.items())) != DEFAULT)
    return [
        dataclasses.replace(seed, template="gemm_cutlass", knobs=tuple(sorted(k.items())))
        for k in combos
    ]


def _view(name: str, shape: tuple[int, int], stride: int, offset: int, rows: bool = True) -> str:
    """`name` as a [shape] operand: rows contiguous with row stride `stride`, or (not `rows`)
    columns contiguous with column stride `stride`."""
    strides = (stride, 1) if rows else (1, stride)
    return f"{name}.as_strided({shape}, {strides}, {name}.storage_offset() + {offset})"


def render_cutlass(spec: Any) -> tuple[str, str]:
    """(Python source, entry name) of the module that runs `spec` through the CUTLASS GEMM."""
    config, found = cutlass_gemm(spec), _operands(spec)
    assert not isinstance(found, str)
    m, n, k = spec.param("m"), spec.param("n"), spec.param("k")
    ins, _ = io_names(spec)
    bias = "None"
    if found.bias is not None:
        name = ins[found.bias[0]]
        bias = f"{name}.as_strided(({n},), (1,), {name}.storage_offset() + {found.bias[1]})"
    c = "None" if found.c is None else _view(ins[found.c[0]], (m, n), found.c[2], found.c[1])
    lines = [
        "import torch",
        "",
        "from kernelpro_backend.ops.cutlass_gemm import register  # and kernelpro::cutlass_gemm",
        "",
        f"SOURCE = {config.source_text()!r}",
        "DIGEST = register(SOURCE)",
        "",
        "",
        f"def {ENTRY}({', '.join([*ins, '_launch=None'])}):",
        "    # one op, traced into the graph as is (no Triton launch for _launch to wrap)",
        f"    a = {_view(ins[found.a[0]], (m, k), found.a[2], found.a[1], found.a_major == 'k')}",
        f"    b = {_view(ins[found.b[0]], (n, k), found.b[2], found.b[1], found.b_major == 'k')}",
        f"    out = torch.ops.kernelpro.cutlass_gemm(a, b, {bias}, {c}, DIGEST)",
        f"    return [{view_as_output(spec, 'out')}]",
        "",
    ]
    return "\n".join(lines), ENTRY
