"""A float32 GEMM under PyTorch's tf32 policy (`precision="tf32"`) on the TF32 tensor cores,
with the spec's elementwise epilogue applied to the accumulator tile (the "tf32" form of
"gemm_library"; library.py decides which specs get it).

Why a form of its own: the GEMM template's tf32 path rounds both operand tiles in registers
inside its main loop (cuBLAS rounds to nearest where Triton's dot truncates) and reads B
row-major; on the H200 it ran at 0.21-0.35x of cuBLAS, 18% of TF32's speed of light, slower
than the tf32x3 form's three products (BENCHMARKS.md, "the tf32 form"). Here the tf32x3 form's
layout (tf32x3.py says why each choice) with one product:
- Y, the operand the tensor cores read from shared memory, is rounded to TF32 and laid out
  K-major ([Q, K], K padded with zeros to a multiple of BLOCK_K) by one pass over memory (read
  once, written once). The tensor cores' truncation of a value exact in TF32 is exact;
- X is loaded where it lies (any strides) and rounded in registers inside the main loop (the
  dot takes its A operand from registers);
- one TF32 product per K step into the float32 accumulator, as cuBLAS's.
Rounding is to nearest, ties away from zero (`cvt.rna.tf32.f32`), as cuBLAS rounds under
PyTorch's tf32 policy: the same values as the GEMM template's tf32 path and the validation's
CPU reference (runtime/validate.round_to_tf32). Infinities stay infinite, NaN stays NaN; a
finite value within half a TF32 step of float32's largest rounds to infinity, as cvt.rna does.
Workspace: Y's bytes. Everything is a Triton launch or an `empty_strided`, so the module can
be inlined like the generated ones.

Owns: `render_tf32(spec, entry)` and `orientation(spec)`. Must not: decide which specs qualify
(library.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..prelude import PRELUDE
from ..spec_view import io_names
from .tf32x3 import Orientation, launch_lines, orientations, product_kernel

# The product kernel's tile (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages, GROUP_M): the fastest
# of six at 2048^3-8192^3 and 4096^3 with an nn.Linear weight (H200, scripts/gpu_tf32_tiles.py,
# BENCHMARKS.md "The tf32 form"): 0.85-0.90x of cuBLAS's TF32 GEMM, where the tf32x3 form's
# 128x128x32 ran 0.71-0.74x and BLOCK_K 64 (two stages fit) 0.45-0.48x.
TILE = (128, 256, 32, 8, 3, 8)
ROUND_BLOCK = 64

_ROUND = """
@triton.jit
def _rna(x):
    # to the nearest TF32 (10 mantissa bits), ties away from zero, as cvt.rna.tf32.f32: the
    # carry of +0x1000 runs into the exponent where it must; NaN kept (its payload could carry)
    r = ((x.to(tl.int32, bitcast=True) + 0x1000) & -8192).to(tl.float32, bitcast=True)
    return tl.where(x == x, r, x)


@triton.jit
def _round(x_ptr, off, y_ptr, R, C, RP, CP, sxr, sxc, syr, syc, BLOCK: tl.constexpr):
    r = (tl.program_id(0) * BLOCK + tl.arange(0, BLOCK))[:, None].to(tl.int64)
    c = (tl.program_id(1) * BLOCK + tl.arange(0, BLOCK))[None, :].to(tl.int64)
    x = tl.load(x_ptr + off + r * sxr + c * sxc, mask=(r < R) & (c < C), other=0.0)
    # the padding of K past the operand is written as zeros
    tl.store(y_ptr + r * syr + c * syc, _rna(x), mask=(r < RP) & (c < CP))
"""

_LOOP = """    for kt in range(0, KP // BLOCK_K):
        if X_FULL:
            x = _rna(tl.load(px))
        else:
            x = _rna(tl.load(px, mask=(kt * BLOCK_K + rk)[None, :] < K, other=0.0))
        y = tl.load(ph)  # rounded, K-major, padded to a multiple of BLOCK_K: no mask
        acc = tl.dot(x, tl.trans(y), acc, input_precision="tf32")
        px += BLOCK_K * SXK
        ph += BLOCK_K
"""


def orientation(spec: Any) -> Orientation:
    """The orientation whose Y (the operand the rounding pass copies) has fewer rows; A in
    registers on a tie. Y is never read raw: the tensor cores would truncate it; X is read where
    it lies (its padded copy is the tf32x3 form's, not measured here)."""
    both = [dataclasses.replace(o, raw=False, x_pad=False) for o in orientations(spec)]
    return min(both, key=lambda o: (o.y[4], o.swapped))


def render_tf32(spec: Any, entry: str, tile: tuple[int, ...] = TILE) -> str:
    """The module of the tf32 form (`tile`: BLOCK_M, BLOCK_N, BLOCK_K, warps, stages,
    GROUP_M)."""
    o = orientation(spec)
    k = spec.param("k")
    kp = -(-k // tile[2]) * tile[2]  # Y's row length: K padded with zeros
    y_in, y_off, sy, syk, q = o.y
    ins, _ = io_names(spec)
    s = ROUND_BLOCK
    lines = [
        *PRELUDE,
        _ROUND,
        product_kernel(spec, o, "_mm", ["py"], _LOOP),
        "",
        f"def {entry}({', '.join([*ins, '_launch=_direct'])}):",
        "    # TF32 tensor cores, operands rounded to nearest as cuBLAS's (templates/tf32.py):",
        f"    # {'B^T' if o.swapped else 'A'} inside the product kernel, "
        f"{'A' if o.swapped else 'B^T'} by one pass here, into a K-major copy",
        f"    dev = {ins[o.x[0]]}.device",
        f"    py = torch.empty_strided(({q}, {kp}), ({kp}, 1), dtype=torch.float32, device=dev)",
        f"    _launch(_round)[(triton.cdiv({kp}, {s}), triton.cdiv({q}, {s}))]("
        f"{ins[y_in]}, {y_off}, py, {k}, {q}, {kp}, {q}, {syk}, {sy}, 1, {kp}, BLOCK={s})",
        *launch_lines(spec, o, "_mm", ["py"], kp, tile, "False"),
    ]
    return "\n".join(lines)
