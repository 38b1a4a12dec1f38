"""The frame of a row-resident CUDA kernel (templates/cluster.py) around its body.

Owns: the `kernelpro-launch` header (one cluster of CTAs per row), the row coordinates each
CTA derives from its block index, the tensors read or written a vector at a time (whose
alignment the kernel checks before taking its vector body) and the launch bounds' CTAs per SM.
Must not: emit the body (templates/cluster.py) or decide legality (cluster_rules.py).
"""

from __future__ import annotations

import json

from .cluster_rules import (
    FLOATS,
    REGISTER_FILE,
    SHARED_PER_SM,
    SPARE_REGISTERS,
    ClusterShape,
    level_of,
    walks_row,
)
from .program_walk import FULL
from .spec import KernelSpec
from .spec_view import io_names


def coords(spec: KernelSpec, rows: tuple[int, ...]) -> list[str]:
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


def header(spec: KernelSpec, shape: ClusterShape) -> str:
    outputs = [{"shape": list(s), "stride": list(st), "dtype": dt} for s, st, dt in spec.outputs]
    args = [name for names in io_names(spec) for name in names]
    doc = {
        "outputs": outputs,
        "grid": [shape.rows * shape.cluster],
        "block": [shape.threads],
        "smem": shape.shared_offsets()[1],
        "args": args,
    }
    return "/* kernelpro-launch\n" + json.dumps(doc, sort_keys=True) + "\n*/"


def vector_pointers(spec: KernelSpec, cols: tuple[int, ...]) -> list[tuple[str, int]]:
    """(pointer, bytes per element) of every tensor read or written a vector at a time."""
    out = {}
    for inp, _, idx in spec.loads:
        if (
            level_of(spec, idx, cols) == FULL
            and spec.inputs[inp][2] in FLOATS
            and walks_row(spec, idx, cols)
        ):
            out[f"in{inp}"] = FLOATS[spec.inputs[inp][2]]
    for k, (_, _, idx, _) in enumerate(spec.stores):
        if level_of(spec, idx, cols) == FULL:
            out[f"out{k}"] = FLOATS[spec.outputs[k][2]]  # cluster_rules: float stores only
    return sorted(out.items())


def min_blocks(shape: ClusterShape) -> int:
    """CTAs per SM the register estimate (and with HOLD=shared, shared memory) allows, at most
    2048 threads per SM: the compiler must fit that many, so a CTA that could share its SM
    does not take all its registers."""
    fit = 2048 // shape.threads
    if shape.hold != "registers":
        fit = min(fit, SHARED_PER_SM // (shape.shared_offsets()[1] + 1024))  # 1 KiB reserved
    estimate = shape.in_registers * max(1, len(shape.resident)) + SPARE_REGISTERS
    if shape.hold == "shared":
        estimate += 4 * shape.vec  # the vector read back from shared memory
    return max(1, min(fit, REGISTER_FILE // (shape.threads * estimate)))
