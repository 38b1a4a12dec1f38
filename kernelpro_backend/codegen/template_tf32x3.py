"""A float32 GEMM under `precision="tf32x3"` as three TF32 tensor-core products, with the
spec's elementwise epilogue applied to the accumulator tile (the "tf32x3" form of
"gemm_library"; template_library.py decides which specs get it).

Why this shape (H100, BENCHMARKS.md "GEMM sweep"): Triton's own `input_precision="tf32x3"`
splits the operands inside the main loop and ran at 0.6-0.8x IEEE cuBLAS. Three cuBLAS TF32
GEMMs over pre-split operands ran at 1.8-2.1x but with 2.7-4.4x IEEE's error against float64:
the tensor cores' float32 accumulation over a whole K loses more than IEEE's FMA chain (a TF32
GEMM of operands exact in TF32 erred 3.9e-3 at 4096^3 where IEEE erred 1.1e-3). Here:
- each operand x is taken as hi = x truncated to TF32 and lo = tf32(x - hi) (to nearest), both
  exact in TF32, so the tensor cores' conversion loses nothing; hi + lo keeps 22 bits of x;
  a_lo @ b_lo (< 2^-20 relative) is dropped; lo is 0 where x is not finite. A rounded hi
  (lo half as large) erred 9-16% less, all 4-5x below IEEE, but its overflow and non-finite
  checks made the form 9% slower at 2048^3 and 4096^3 (H100, BENCHMARKS.md "The tf32x3 form's
  split");
- B is split by one pass over memory into hi and lo stored K-major ([N, K]): TF32 wgmma reads
  its shared-memory operands K-major, and a row-major B made Triton's TF32 dot 3.5x slower
  (splitting B in registers too ran at 0.7x IEEE on a row-major B: it goes back through shared
  memory); K is padded with zeros to a multiple of BLOCK_K, so its loads need no mask;
- A is loaded as it is (any strides) and split in registers inside the main loop: the dot takes
  its A operand from registers, so A makes no trip through memory for the split (H100, both
  forms in one process: 1.75x IEEE cuBLAS against 1.69-1.70x at 2048^3, 1.81-1.82x against
  1.72-1.83x at 4096^3; BENCHMARKS.md "The tf32x3 form's split");
- per K step the three products are summed into a fresh tile (small terms first) and that
  tile is added to the float32 accumulator with a rounded add: the tensor cores accumulate only
  BLOCK_K * 3 products, so the error stayed 5x below IEEE's at 2048-8192 (measured).
Workspace: twice B's bytes. Everything is a Triton launch or an `empty_strided`, so
the module can be inlined like the generated ones (operand offsets go to the kernels).

Owns: `render_tf32x3(spec, entry)`. Must not: decide which specs qualify (template_library).
"""

from __future__ import annotations

from typing import Any

from .emitter import Emitter
from .prelude import PRELUDE

# The main kernel's tile: the fastest of the configurations measured at 2048-8192 with both
# operands pre-split, and again with A split in registers (A and B's two parts per stage; 4
# stages ran no faster, BLOCK_K 64 fits 2 stages and ran 15% slower).
BLOCK_M, BLOCK_N, BLOCK_K, WARPS, STAGES, GROUP_M = 128, 128, 32, 8, 3, 8
SPLIT_BLOCK = 64

_SPLIT = """
@triton.jit
def _parts(x):
    # hi truncated (never overflows; inf stays inf), lo = x - hi exact, then rounded to TF32;
    # lo is NaN only where x is not finite (inf - inf): 0 there
    hi = (x.to(tl.int32, bitcast=True) & -8192).to(tl.float32, bitcast=True)
    lo = x - hi
    lo = ((lo.to(tl.int32, bitcast=True) + 0x1000) & -8192).to(tl.float32, bitcast=True)
    return hi, tl.where(lo == lo, lo, 0.0)


@triton.jit
def _split(x_ptr, off, hi_ptr, lo_ptr, R, C, RP, CP, sxr, sxc, shr, shc, BLOCK: tl.constexpr):
    r = (tl.program_id(0) * BLOCK + tl.arange(0, BLOCK))[:, None].to(tl.int64)
    c = (tl.program_id(1) * BLOCK + tl.arange(0, BLOCK))[None, :].to(tl.int64)
    x = tl.load(x_ptr + off + r * sxr + c * sxc, mask=(r < R) & (c < C), other=0.0)
    hi, lo = _parts(x)
    mask = (r < RP) & (c < CP)  # the padding of K past the operand is written as zeros
    tl.store(hi_ptr + r * shr + c * shc, hi, mask=mask)
    tl.store(lo_ptr + r * shr + c * shc, lo, mask=mask)
"""


_MAIN_LOOP = """    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group = pid // (GROUP_M * num_pid_n)
    first_m = group * GROUP_M
    group_m = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * num_pid_n)) % group_m
    pid_n = (pid % (GROUP_M * num_pid_n)) // group_m
    rk = tl.arange(0, BLOCK_K)
    # rows past the edge read a valid row (their results are never stored)
    ram = tl.max_contiguous(tl.multiple_of((pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M, BLOCK_M), BLOCK_M)
    rbn = tl.max_contiguous(tl.multiple_of((pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N, BLOCK_N), BLOCK_N)
    pa = A_PTR + ram.to(tl.int64)[:, None] * SAM + rk[None, :] * SAK
    pb = rbn.to(tl.int64)[:, None] * KP + rk[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(0, KP // BLOCK_K):
        if KP == K:
            a_h, a_l = _parts(tl.load(pa))
        else:
            a_h, a_l = _parts(tl.load(pa, mask=(kt * BLOCK_K + rk)[None, :] < K, other=0.0))
        b_h = tl.load(bh + pb)  # B's parts are padded to a multiple of BLOCK_K: no mask
        b_l = tl.load(bl + pb)
        part = tl.dot(a_l, tl.trans(b_h), input_precision="tf32")
        part = tl.dot(a_h, tl.trans(b_l), part, input_precision="tf32")
        part = tl.dot(a_h, tl.trans(b_h), part, input_precision="tf32")
        acc += part
        pa += BLOCK_K * SAK
        pb += BLOCK_K
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]).to(tl.int64)
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]).to(tl.int64)
    row_mask = rm < M
    mask = row_mask & (rn < N)
"""


def _main_kernel(spec: Any) -> str:
    """The product kernel: the main loop above (A read where it lies: its input, offset and
    strides are constants of the kernel), then the spec's epilogue on the accumulator (the GEMM
    template's Emitter: bias, activations, residuals, casts, several outputs)."""
    a_in, a_off, (_, sam, sak) = spec.param("a")
    params = ["bh", "bl"] + [f"in{i}" for i in range(len(spec.inputs))]
    params += [f"out{j}" for j in range(len(spec.outputs))]
    em = Emitter(spec, ["rm", "rn"], [1], spec.param("n"), row_var="rm")
    em.local_memo[("A", 0)] = "acc"
    for j in range(len(spec.stores)):
        em.store(j, f"out{j}")
    head = [
        "@triton.jit",
        f"def _mm3({', '.join(params)}, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, "
        "KP: tl.constexpr, "
        "BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, "
        "GROUP_M: tl.constexpr):",
    ]
    loop = _MAIN_LOOP.replace("A_PTR", f"(in{a_in} + {a_off})").replace("SAM", str(sam))
    loop = loop.replace("SAK", str(sak))
    return "\n".join(head) + "\n" + loop + "\n".join(em.lines) + "\n"


def render_tf32x3(spec: Any, entry: str) -> str:
    m, n, k = spec.param("m"), spec.param("n"), spec.param("k")
    kp = -(-k // BLOCK_K) * BLOCK_K  # the parts' row length: K padded with zeros
    a_in = spec.param("a")[0]
    b_in, b_off, (_, sbk, sbn) = spec.param("b")
    ins = [f"in{i}" for i in range(len(spec.inputs))]
    outs = [f"out{j}" for j in range(len(spec.outputs))]
    s = SPLIT_BLOCK
    tiles = f"triton.cdiv({m}, {BLOCK_M}) * triton.cdiv({n}, {BLOCK_N})"
    new = "torch.empty_strided(({rows}, {kp}), ({kp}, 1), dtype=torch.float32, device=dev)"
    lines = [
        *PRELUDE,
        _SPLIT,
        _main_kernel(spec),
        "",
        f"def {entry}({', '.join([*ins, '_launch=_direct'])}):",
        "    # 3xTF32: a ~ a_hi + a_lo, b ~ b_hi + b_lo, each part exact in TF32 (template_tf32x3);",
        "    # A is split inside the product kernel, B here",
        f"    dev = {ins[a_in]}.device",
        f"    bh, bl = {new.format(rows=n, kp=kp)}, {new.format(rows=n, kp=kp)}  # B^T: K-major",
        f"    _launch(_split)[(triton.cdiv({kp}, {s}), triton.cdiv({n}, {s}))]("
        f"{ins[b_in]}, {b_off}, bh, bl, {k}, {n}, {kp}, {n}, {sbk}, {sbn}, 1, {kp}, BLOCK={s})",
        *(
            f"    {o} = torch.empty_strided({tuple(shape)}, {tuple(stride)}, "
            f"dtype=torch.{dtype}, device=dev)"
            for o, (shape, stride, dtype) in zip(outs, spec.outputs, strict=True)
        ),
        f"    _launch(_mm3)[({tiles},)](bh, bl, {', '.join([*ins, *outs])}, M={m}, "
        f"N={n}, K={k}, KP={kp}, BLOCK_M={BLOCK_M}, BLOCK_N={BLOCK_N}, BLOCK_K={BLOCK_K}, "
        f"GROUP_M={GROUP_M}, num_warps={WARPS}, num_stages={STAGES})",
        f"    return [{', '.join(outs)}]",
        "",
    ]
    return "\n".join(lines)
