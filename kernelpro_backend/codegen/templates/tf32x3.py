"""A float32 GEMM under `precision="tf32x3"` as three TF32 tensor-core products, with the
spec's elementwise epilogue applied to the accumulator tile (the "tf32x3" form of
"gemm_library"; library.py decides which specs get it).

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
- one operand (Y) is read by the tensor cores from shared memory, K-major ([rows, K]): TF32
  wgmma reads its shared-memory operands K-major, and a row-major B made Triton's TF32 dot
  3.5x slower (splitting it in registers too ran at 0.7x IEEE: it goes back through shared
  memory). Y is split by one pass over memory, K padded with zeros to a multiple of BLOCK_K so
  its loads need no mask. Where Y is K-major already (an nn.Linear weight as B, a row-major A
  in the transposed product) that pass writes only lo and the kernel reads Y where it lies as
  its hi: Hopper's tensor cores take the top 19 bits of a float32 operand, which is hi
  (measured: the same error as a truncated copy; the interpreter and older GPUs truncate it in
  the kernel instead);
- the other operand (X) is loaded as it is (any strides) and split in registers inside the
  main loop: the dot takes its A operand from registers, so X makes no trip through memory
  for the split (H100: 1.75x IEEE cuBLAS against 1.69-1.70x at 2048^3; BENCHMARKS.md "The
  tf32x3 form's split");
- X and Y are A and B^T, or B^T and A (the product transposed, C^T = B^T A^T, the tile
  transposed back before the epilogue), whichever makes the split pass move fewer bytes: a
  row-major B (`x @ w`) as X and A raw as Y; H100, 2048^3 1.77-1.80x IEEE (was 1.72-1.76x),
  2048x4096x8192 1.80-1.83x (was 1.74-1.75x) (BENCHMARKS.md "The tf32x3 form's orientation");
- per K step the three products are summed into a fresh tile (small terms first) and that
  tile is added to the float32 accumulator with a rounded add: the tensor cores accumulate only
  BLOCK_K * 3 products, so the error stayed 5x below IEEE's at 2048-8192 (measured).
Workspace: Y's bytes (lo), twice them when Y is not raw. Everything is a Triton launch or an
`empty_strided`, so the module can be inlined like the generated ones (operand offsets go to
the kernels).

Owns: `render_tf32x3(spec, entry, orientation)` and `orientations(spec)`. Must not: decide which
specs qualify (library.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..emitter import Emitter
from ..prelude import PRELUDE
from ..spec_view import io_names

# The main kernel's tile: the fastest of the configurations measured at 2048-8192 with both
# operands pre-split, and again with A split in registers (A and B's two parts per stage; 4
# stages ran no faster, BLOCK_K 64 fits 2 stages and ran 15% slower).
# (read when rendering: scripts/gpu_tf32x3_tiles.py and gpu_tf32x3_template_ab.py set them)
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
def _split(x_ptr, off, hi_ptr, lo_ptr, R, C, RP, CP, sxr, sxc, shr, shc, BLOCK: tl.constexpr,
           HI: tl.constexpr = True):
    r = (tl.program_id(0) * BLOCK + tl.arange(0, BLOCK))[:, None].to(tl.int64)
    c = (tl.program_id(1) * BLOCK + tl.arange(0, BLOCK))[None, :].to(tl.int64)
    x = tl.load(x_ptr + off + r * sxr + c * sxc, mask=(r < R) & (c < C), other=0.0)
    hi, lo = _parts(x)
    mask = (r < RP) & (c < CP)  # the padding of K past the operand is written as zeros
    if HI:  # else the product kernel reads the operand itself as its hi part
        tl.store(hi_ptr + r * shr + c * shc, hi, mask=mask)
    tl.store(lo_ptr + r * shr + c * shc, lo, mask=mask)


@triton.jit
def _pad(x_ptr, off, y_ptr, R, C, RP, CP, sxr, sxc, syr, syc, BLOCK: tl.constexpr):
    # X copied as it is into a K-major buffer, K padded with zeros (Orientation.x_pad)
    r = (tl.program_id(0) * BLOCK + tl.arange(0, BLOCK))[:, None].to(tl.int64)
    c = (tl.program_id(1) * BLOCK + tl.arange(0, BLOCK))[None, :].to(tl.int64)
    x = tl.load(x_ptr + off + r * sxr + c * sxc, mask=(r < R) & (c < C), other=0.0)
    tl.store(y_ptr + r * syr + c * syc, x, mask=(r < RP) & (c < CP))
"""


# X is the operand split in registers ([P, K], any strides), Y the one read from shared memory
# ([Q, K], K-major): acc[P, Q] = X @ Y^T, transposed at the end when X is B^T and Y is A.
# TILE_HEAD: the program's tile and the pointers of its first K step (tf32.py too).
TILE_HEAD = """    pid = tl.program_id(0)
    num_pid_p = tl.cdiv(P, BLOCK_P)
    num_pid_q = tl.cdiv(Q, BLOCK_Q)
    group = pid // (GROUP_M * num_pid_q)
    first_p = group * GROUP_M
    group_p = tl.minimum(num_pid_p - first_p, GROUP_M)
    pid_p = first_p + (pid % (GROUP_M * num_pid_q)) % group_p
    pid_q = (pid % (GROUP_M * num_pid_q)) // group_p
    rk = tl.arange(0, BLOCK_K)
    # rows past the edge read a valid row (their results are never stored)
    rxp = tl.max_contiguous(tl.multiple_of((pid_p * BLOCK_P + tl.arange(0, BLOCK_P)) % P, BLOCK_P), BLOCK_P)
    ryq = tl.max_contiguous(tl.multiple_of((pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)) % Q, BLOCK_Q), BLOCK_Q)
    px = X_PTR + rxp.to(tl.int64)[:, None] * SXP + rk[None, :] * SXK
    ph = YH_PTR + ryq.to(tl.int64)[:, None] * SYH + rk[None, :]
    acc = tl.zeros((BLOCK_P, BLOCK_Q), dtype=tl.float32)
"""
_LOOP = """    pl = yl + ryq.to(tl.int64)[:, None] * KP + rk[None, :]
    for kt in range(0, KP // BLOCK_K):
        if X_FULL:  # X's K is whole tiles (or X was copied padded): no mask
            x_h, x_l = _parts(tl.load(px))
        else:
            x_h, x_l = _parts(tl.load(px, mask=(kt * BLOCK_K + rk)[None, :] < K, other=0.0))
        y_h = tl.load(ph)  # Y's parts are padded to a multiple of BLOCK_K: no mask
        if Y_TRUNC:  # Y itself as its hi part, where the dot does not truncate it to TF32
            y_h = (y_h.to(tl.int32, bitcast=True) & -8192).to(tl.float32, bitcast=True)
        y_l = tl.load(pl)
        part = tl.dot(x_l, tl.trans(y_h), input_precision="tf32")
        part = tl.dot(x_h, tl.trans(y_l), part, input_precision="tf32")
        part = tl.dot(x_h, tl.trans(y_h), part, input_precision="tf32")
        acc += part
        px += BLOCK_K * SXK
        ph += BLOCK_K
        pl += BLOCK_K
"""
OUT_NORMAL = """    rm = (pid_p * BLOCK_P + tl.arange(0, BLOCK_P)[:, None]).to(tl.int64)
    rn = (pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)[None, :]).to(tl.int64)
"""
OUT_SWAPPED = """    acc = tl.trans(acc)
    rm = (pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)[:, None]).to(tl.int64)
    rn = (pid_p * BLOCK_P + tl.arange(0, BLOCK_P)[None, :]).to(tl.int64)
"""
MASKS = """    row_mask = rm < M
    mask = row_mask & (rn < N)
"""


@dataclasses.dataclass(frozen=True)
class Orientation:
    """Which operand is split in registers (X) and which is read K-major from shared memory
    (Y), and whether Y is read where it lies as its own hi part (`raw`: its split pass then
    writes lo only). Each operand as (input, offset, row stride, K stride, rows)."""

    swapped: bool
    x: tuple[int, int, int, int, int]
    y: tuple[int, int, int, int, int]
    raw: bool
    x_pad: bool = False

    def pass_elements(self, k: int) -> int:
        """Elements the passes before the product move: Y read, and its lo (and hi, unless
        raw) written; X read and written when it is copied padded."""
        return self.y[4] * k * (2 if self.raw else 3) + (self.x[4] * k * 2 if self.x_pad else 0)


def _aligned(x: tuple[int, int, int, int, int], k: int) -> bool:
    """Whether X's tiles load unmasked and on 16 bytes: K whole tiles, the offset and every
    non-unit stride a multiple of 4 floats, one unit stride (rows or K contiguous)."""
    _, off, sp, sk, _ = x
    strides = (sp, sk)
    return (
        k % BLOCK_K == 0
        and off % 4 == 0
        and 1 in strides
        and all(s == 1 or s % 4 == 0 for s in strides)
    )


def orientations(spec: Any) -> list[Orientation]:
    """Both ways of computing the GEMM, the cheaper split pass first (the normal one on a tie):
    A in registers and B^T from shared memory, or B^T in registers and A from shared memory
    (the transposed product); Y is raw where it is K-major (unit K stride) with rows on 16
    bytes and K a multiple of BLOCK_K (its loads are not masked). X is copied K-major with K
    padded (`x_pad`) where its loads would be masked (K not a multiple of BLOCK_K) or not on 16
    bytes: KernelBench's 8205x2949 @ 2949x5921 read every X tile masked and misaligned
    (1.68x IEEE cuBLAS on an H200 where aligned shapes reach 1.80-1.88x)."""
    m, n, k = spec.param("m"), spec.param("n"), spec.param("k")
    a_in, a_off, (_, sam, sak) = spec.param("a")
    b_in, b_off, (_, sbk, sbn) = spec.param("b")
    a, bt = (a_in, a_off, sam, sak, m), (b_in, b_off, sbn, sbk, n)
    out = []
    for swapped, x, y in ((False, a, bt), (True, bt, a)):
        raw = y[3] == 1 and y[2] % 4 == 0 and y[1] % 4 == 0 and k % BLOCK_K == 0
        out.append(Orientation(swapped, x, y, raw, not _aligned(x, k)))
    return sorted(out, key=lambda o: o.pass_elements(k))


def product_kernel(spec: Any, o: Orientation, name: str, y_params: list[str], loop: str) -> str:
    """A product kernel `name`: TILE_HEAD, then `loop` (which accumulates into `acc`), X read
    where it lies (and Y when raw: inputs, offsets and strides are constants of the kernel),
    then the spec's epilogue on the accumulator (the GEMM template's Emitter: bias,
    activations, residuals, casts, several outputs). `y_params`: the kernel's workspace
    arguments, first the one read as Y's (hi) part."""
    ins, outs = io_names(spec)
    params = y_params + ins + outs
    em = Emitter(spec, ["rm", "rn"], [1], spec.param("n"), row_var="rm")
    em.local_memo[("A", 0)] = "acc"
    for j in range(len(spec.stores)):
        em.store(j, f"out{j}")
    head = [
        "@triton.jit",
        f"def {name}({', '.join(params)}, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, "
        "P: tl.constexpr, Q: tl.constexpr, KP: tl.constexpr, X_FULL: tl.constexpr, "
        "Y_TRUNC: tl.constexpr, "
        "BLOCK_P: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, "
        "GROUP_M: tl.constexpr):",
    ]
    x_in, x_off, sxp, sxk, _ = o.x
    y_in, y_off, sy, _, _ = o.y
    # X where it lies, or its padded K-major copy (the workspace argument "xp")
    x_ptr, x_rows, x_k = ("xp", "KP", "1") if o.x_pad else (f"(in{x_in} + {x_off})", sxp, sxk)
    body = (TILE_HEAD + loop).replace("X_PTR", x_ptr).replace("SXP", str(x_rows))
    body = body.replace("SXK", str(x_k))
    body = body.replace("YH_PTR", f"(in{y_in} + {y_off})" if o.raw else y_params[0])
    body = body.replace("SYH", str(sy) if o.raw else "KP")
    out = OUT_SWAPPED if o.swapped else OUT_NORMAL
    return "\n".join(head) + "\n" + body + out + MASKS + "\n".join(em.lines) + "\n"


def launch_lines(
    spec: Any, o: Orientation, kernel: str, workspace: list[str], kp: int, tile: tuple, y_trunc: str
) -> list[str]:
    """The entry's last lines: the outputs allocated as the spec lays them out, `kernel` (a
    `product_kernel`, its `workspace` arguments first) launched over its tiles, the outputs
    returned. `tile`: BLOCK_M, BLOCK_N, BLOCK_K, warps, stages, GROUP_M."""
    bm, bn, bk, warps, stages, group_m = tile
    m, n, k = spec.param("m"), spec.param("n"), spec.param("k")
    ins, outs = io_names(spec)
    p, q = o.x[4], o.y[4]
    return [
        *(
            f"    {o_} = torch.empty_strided({tuple(shape)}, {tuple(stride)}, "
            f"dtype=torch.{dtype}, device=dev)"
            for o_, (shape, stride, dtype) in zip(outs, spec.outputs, strict=True)
        ),
        f"    _launch({kernel})[(triton.cdiv({p}, {bm}) * triton.cdiv({q}, {bn}),)]("
        f"{', '.join([*workspace, *ins, *outs])}, M={m}, N={n}, K={k}, P={p}, Q={q}, KP={kp}, "
        f"X_FULL={kp == k or o.x_pad}, "
        f"Y_TRUNC={y_trunc}, BLOCK_P={bm}, BLOCK_Q={bn}, BLOCK_K={bk}, GROUP_M={group_m}, "
        f"num_warps={warps}, num_stages={stages})",
        f"    return [{', '.join(outs)}]",
        "",
    ]


def render_tf32x3(spec: Any, entry: str, orientation: Orientation | None = None) -> str:
    """The module of the tf32x3 form (`orientation`: the cheaper of `orientations(spec)`)."""
    o = orientation or orientations(spec)[0]
    k = spec.param("k")
    kp = -(-k // BLOCK_K) * BLOCK_K  # the parts' row length: K padded with zeros
    y_in, y_off, sy, syk, q = o.y
    ins, _ = io_names(spec)
    s = SPLIT_BLOCK
    new = "torch.empty_strided(({rows}, {kp}), ({kp}, 1), dtype=torch.float32, device=dev)"
    parts = "lo" if o.raw else "hi and lo"
    workspace = ["yh", "yl", *(["xp"] if o.x_pad else [])]
    x_in, x_off, sxp, sxk, p = o.x
    lines = [
        *PRELUDE,
        _SPLIT,
        product_kernel(spec, o, "_mm3", workspace, _LOOP),
        "",
        f"def {entry}({', '.join([*ins, '_launch=_direct'])}):",
        "    # 3xTF32: a ~ a_hi + a_lo, b ~ b_hi + b_lo, each part exact in TF32 (templates/tf32x3.py);",
        f"    # {'B^T' if o.swapped else 'A'} is split inside the product kernel, "
        f"{'A' if o.swapped else 'B^T'}'s {parts} here",
        f"    dev = {ins[o.x[0]]}.device",
        f"    yl = {new.format(rows=q, kp=kp)}  # K-major",
        f"    yh = {'yl' if o.raw else new.format(rows=q, kp=kp)}",
        # Hopper's wgmma reads Y from shared memory and takes its top 19 bits (TF32): the raw
        # operand is its own hi there; elsewhere (the interpreter, older mma) it is truncated
        "    y_trunc = INTERPRET or torch.cuda.get_device_capability(dev)[0] < 9"
        if o.raw
        else "    y_trunc = False",
        f"    _launch(_split)[(triton.cdiv({kp}, {s}), triton.cdiv({q}, {s}))]("
        f"{ins[y_in]}, {y_off}, yh, yl, {k}, {q}, {kp}, {q}, {syk}, {sy}, 1, {kp}, BLOCK={s}, "
        f"HI={not o.raw})",
        *(
            [
                f"    xp = {new.format(rows=p, kp=kp)}  # X copied K-major, K padded",
                f"    _launch(_pad)[(triton.cdiv({kp}, {s}), triton.cdiv({p}, {s}))]("
                f"{ins[x_in]}, {x_off}, xp, {k}, {p}, {kp}, {p}, {sxk}, {sxp}, 1, {kp}, BLOCK={s})",
            ]
            if o.x_pad
            else []
        ),
        *launch_lines(
            spec,
            o,
            "_mm3",
            workspace,
            kp,
            (BLOCK_M, BLOCK_N, BLOCK_K, WARPS, STAGES, GROUP_M),
            "y_trunc",
        ),
    ]
    return "\n".join(lines)
