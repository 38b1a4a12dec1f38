"""Which convolution specs CUTLASS's Hopper implicit-GEMM conv computes ("conv_cutlass"), its
knobs, and the module that calls it.

A "conv" spec maps to templates/cutlass_conv.CutlassConv (fprop) when it is one dense 2-D
convolution and nothing else (no bias, no epilogue: the visitor's fusions come later), its
input, weight and output packed channels-last at offset 0, in bf16/fp16, or float32 where the
spec's precision is TF32 (PyTorch allows TF32 for convolutions by default), with the channel
counts multiples of 16 bytes (TMA rows). A "conv_backward" spec maps to dgrad (the input
gradient, unit strides only) and wgrad (the weight's, 16-bit only), each where it is asked for,
on the same terms, no bias gradient. The knobs pick the tile's N and the cluster's M; the
tile's M stays 128 and its K 64 (32 for TF32), 128-byte rows.

The rendered module embeds the CUDA C++ source and calls it through the custom op
`kernelpro::cutlass_conv` (ops/cutlass_conv.py), which traces into Inductor's graph as one node.

Owns: `conv_cutlass_problem(spec)` (why a spec cannot be this conv, or None),
`cutlass_convs(spec)` (its `CutlassConv`s: fprop, or dgrad and wgrad for a backward's input and
weight gradients), `conv_cutlass_specs(seed)` (the seed as every legal configuration) and
`render_cutlass_conv(spec)`.
Must not: compile, load or launch (runtime/cuda/host_conv.py), or decide which configurations
are built before a search (tuner/cutlass_builds.py).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from .spec_view import io_names
from .templates.cutlass_conv import CutlassConv

ENTRY = "entry"
SPACE: dict[str, tuple[Any, ...]] = {"TILE_N": (64, 128, 256), "CLUSTER_M": (1, 2)}
DEFAULT = (("CLUSTER_M", 1), ("TILE_N", 128))
_ALIGN_BYTES = 16  # TMA's rows
_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def _channels_last(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    n, c, h, w = shape
    return tuple(strides) == (h * w * c, 1, w * c, c)


def _backward(spec: Any) -> bool:
    return "grad_out" in dict(spec.anchor)


def _operators(spec: Any) -> list[tuple[str, int]]:
    """(operator, output index) of each CUTLASS kernel the spec runs: fprop; or dgrad for the
    input gradient (the stores' ("A", 0)) and wgrad for the weight's (("A", 1))."""
    if not _backward(spec):
        return [("fprop", 0)]
    picks = {tuple(ref): j for j, (ref, _, _, _) in enumerate(spec.stores)}
    out = [("dgrad", picks[("A", 0)])] if ("A", 0) in picks else []
    return out + ([("wgrad", picks[("A", 1)])] if ("A", 1) in picks else [])


def conv_cutlass_problem(spec: Any) -> str | None:
    """Why `spec` cannot run as CUTLASS's conv, or None when it can."""
    if spec.template not in ("conv", "conv_backward", "conv_cutlass"):
        return "not a dense convolution or its backward"
    a = dict(spec.anchor)
    dtype = str(a["operand_dtype"])
    if dtype not in _BYTES:
        return f"operands of {dtype}"
    if dtype == "float32" and spec.precision != "tf32":
        return "float32 without TF32 for convolutions: CUTLASS's conv runs float32 as TF32"
    if int(a["groups"]) != 1:
        return "a grouped convolution: CUTLASS's conv here is dense"
    operators = _operators(spec)
    if spec.ops or len(operators) != len(spec.stores) or not operators:
        return "the subgraph computes more than the convolution's results (no epilogue yet)"
    if any(dt != dtype for _, _, dt in (*spec.inputs, *spec.outputs)):
        return "inputs and outputs of other dtypes than the operands"
    n, c, h, w = a["x_shape"]
    k, (r, s), (p, q) = int(a["c_out"]), a["kernel"], a["out_hw"]
    shapes = {"x": (n, c, h, w), "weight": (k, c, r, s), "grad_out": (n, k, p, q)}
    laid = [(a[name][1], shapes[name], a[name][2]) for name in shapes if name in a]
    results = {"fprop": shapes["grad_out"], "dgrad": shapes["x"], "wgrad": shapes["weight"]}
    laid += [(0, results[op], spec.outputs[j][1]) for op, j in operators]
    if any(off or not _channels_last(shape, st) for off, shape, st in laid):
        return "operands and results must be packed channels-last at offset 0"
    align = _ALIGN_BYTES // _BYTES[dtype]
    if c % align or k % align:
        return f"channels ({c} in, {k} out) must be multiples of {align} (16-byte rows)"
    names = [op for op, _ in operators]
    if "dgrad" in names and tuple(a["stride"]) != (1, 1):
        return "a strided input gradient (sm90's dgrad loads dy in im2col mode: unit strides)"
    if "wgrad" in names and dtype == "float32":
        return "a float32 weight gradient (TF32 wgmma needs K-major operands)"
    return None


def cutlass_convs(spec: Any) -> list[CutlassConv]:
    """The CUTLASS configuration of each kernel a legal "conv_cutlass" spec runs."""
    dtype = str(dict(spec.anchor)["operand_dtype"])
    knobs = dict(spec.knobs) or dict(DEFAULT)
    k = 32 if dtype == "float32" else 64
    tile, cluster = (128, int(knobs["TILE_N"]), k), (int(knobs["CLUSTER_M"]), 1)
    return [CutlassConv(op, dtype, tile, cluster) for op, _ in _operators(spec)]


def cutlass_conv(spec: Any) -> CutlassConv:
    """The first kernel's configuration (a forward spec's only one)."""
    return cutlass_convs(spec)[0]


def conv_cutlass_specs(seed: Any) -> list[Any]:
    """The seed as a "conv_cutlass" spec in every configuration of its knobs (the default
    first); [] when CUTLASS's conv cannot compute it."""
    if conv_cutlass_problem(seed) is not None:
        return []
    combos = [dict(zip(SPACE, v, strict=True)) for v in itertools.product(*SPACE.values())]
    combos.sort(key=lambda kn: tuple(sorted(kn.items())) != DEFAULT)
    return [
        dataclasses.replace(seed, template="conv_cutlass", knobs=tuple(sorted(kn.items())))
        for kn in combos
    ]


def render_cutlass_conv(spec: Any) -> tuple[str, str]:
    """(Python source, entry name) of the module that runs `spec` through CUTLASS's conv: one
    `kernelpro::cutlass_conv` call a result."""
    a = dict(spec.anchor)
    ins, _ = io_names(spec)
    n, c, h, w = a["x_shape"]
    r, s = a["kernel"]
    problem = [n, h, w, c, int(a["c_out"]), r, s, *a["padding"], *a["stride"], *a["dilation"]]
    operands = {  # (act, flt) of each operator, by the spec's input names
        "fprop": ("x", "weight"), "dgrad": ("grad_out", "weight"), "wgrad": ("grad_out", "x"),
    }  # fmt: skip
    lines = [
        "import torch",
        "",
        "from kernelpro_backend.ops.cutlass_conv import register  # and kernelpro::cutlass_conv",
        "",
        f"PROBLEM = {[int(v) for v in problem]!r}",
    ]
    calls = []
    for i, (config, (op, j)) in enumerate(zip(cutlass_convs(spec), _operators(spec), strict=True)):
        lines += [f"SOURCE_{i} = {config.source_text()!r}", f"DIGEST_{i} = register(SOURCE_{i})"]
        act, flt = (ins[a[name][0]] for name in operands[op])
        call = f"torch.ops.kernelpro.cutlass_conv({act}, {flt}, PROBLEM, DIGEST_{i}, {op!r})"
        calls.append((j, call))
    lines += [
        "",
        "",
        f"def {ENTRY}({', '.join([*ins, '_launch=None'])}):",
        "    # one op a result, traced into the graph as is (no Triton launch for _launch to wrap)",
        f"    return [{', '.join(call for _, call in sorted(calls))}]",
        "",
    ]
    return "\n".join(lines), ENTRY
