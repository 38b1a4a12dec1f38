"""The weight repack the implicit-GEMM convolutions launch before their main kernel (knob PACK_W).

A convolution's weight w[co, ci, kh, kw] is the B operand of its implicit GEMM. Stored as
PyTorch's default OIHW (NCHW), a B tile of the forward ([BLOCK_K input channels, BLOCK_N output
channels] at one tap) is a gather: neighbours along either axis sit KH*KW or C_in*KH*KW elements
apart, so every element is its own 32-byte sector (8x the L2 traffic of a contiguous tile for
float32) and its own scalar load instruction. The repack writes, once per call, the weight as
the main loop reads it, one tap after another, each B tile a block of contiguous rows:
- 16-bit and IEEE float32 operands: wp[g, kh, kw, k, n] (N-major: (k, n) = (ci, co) for the
  forward, (co, ci) for the input gradient), BLOCK_K rows of BLOCK_N contiguous elements;
- float32 on the TF32 tensor cores (tf32, tf32x3): wp[g, kh, kw, n, k] (K-major), BLOCK_N rows
  of BLOCK_K contiguous elements. Hopper's TF32 wgmma reads its shared-memory operands K-major
  only (the transposed-operand bits are for 16-bit types): an N-major B tile has Triton
  transpose it on its way into shared memory, one 4-byte element at a time, which made a TF32
  GEMM 3.5x slower (templates/tf32x3.py; the tf32 GEMM form reads its B K-major for this).
Under the tf32 policy the repack also rounds the weight to tf32 (templates/gemm.tf32_rounding
says why rounding), so the main loop rounds only its A tile (the dot takes A from registers)
and B goes from memory to shared memory to the MMA unchanged.
The cost of the weight repack is one read and one write of the weight (2.4 MB for ResNet-50's
3x3 256 -> 256 in float32: about 2 us on an H100) and one launch; the search weighs that
against the main loop.
The input may get the same treatment (knob PACK_X): `pack_input` writes it once, dense and
rounded to tf32 under the tf32 policy, laid out so the main loop's tile of it is contiguous
along the reduction. The weight gradient's B (the input at a tap, pixels by channels: dense
NCHW; on by default under tf32) then goes straight into shared memory instead of being
rounded in registers and stored back there every step (templates/tf32x3.py measured that
round trip: 2.5x slower). The forward's A (pixels by channels: dense NHWC; off by default,
for the search to weigh) is then one vector load per row of the tile, not a gather one 4-byte
element per channel as an NCHW input is. Its cost: one read and one write of the input.
Must not: lower aten, or read anything but the weight (the input: `pack_input`).
"""

from __future__ import annotations

from ..spec import KernelSpec

PACK_BLOCK = 1024  # packed weight elements per program


def tf32_round(names: list[str], indent: str = "    ") -> list[str]:
    """Round the named float32 tensors to the nearest tf32 (ties away from zero, as
    `cvt.rna.tf32.f32` and cuDNN do); integer ops under the interpreter, which has no PTX."""
    asm = '"cvt.rna.tf32.f32 $0, $1;", "=r,r"'
    lines = [f"{indent}if INTERPRET:"]
    for x in names:
        lines.append(
            f"{indent}    {x} = tl.where({x} != {x}, {x}, "
            f"(({x}.to(tl.uint32, bitcast=True) + 0x1000) & 0xFFFFE000)"
            ".to(tl.float32, bitcast=True))"
        )
    lines.append(f"{indent}else:")
    for x in names:
        lines.append(
            f"{indent}    {x} = tl.inline_asm_elementwise({asm}, [{x}], dtype=tl.float32, "
            "is_pure=True, pack=1)"
        )
    return lines


def rounds_in_pack(spec: KernelSpec) -> bool:
    """Whether the repack rounds the weight to tf32 (float32 operands under the tf32 policy)."""
    return spec.precision == "tf32" and spec.param("operand_dtype") == "float32"


def packs(spec: KernelSpec) -> bool:
    return int(spec.knob("PACK_W")) == 1


def k_major(spec: KernelSpec) -> bool:
    """Whether the repack lays B out K-major: float32 operands multiplied on the TF32 tensor
    cores (see the module docstring); IEEE float32 runs on FMAs, 16-bit wgmma takes either."""
    return spec.param("operand_dtype") == "float32" and spec.precision in ("tf32", "tf32x3")


def pack_weight(
    spec: KernelSpec, ins: list[str], outs: list[str], dgrad: bool
) -> tuple[list[str], list[str], tuple[str, str, str]]:
    """(kernel lines, host scratch lines, launch) writing `wp` (see the module docstring);
    `dgrad`: rows are the group's output channels and columns its input channels."""
    c_in = spec.param("x_shape")[1]
    groups, c_out = spec.param("groups"), spec.param("c_out")
    cig, cog = c_in // groups, c_out // groups
    kh, kw = spec.param("kernel")
    w_in, w_off, (swo, swi, swh, sww) = spec.param("weight")
    rows, cols = (cog, cig) if dgrad else (cig, cog)  # (K, N) of the main loop's B
    size = c_out * cig * kh * kw
    co, ci = ("r", "c") if dgrad else ("c", "r")
    # r: B's reduction row, c: its column; the innermost of the two is contiguous in wp
    inner, outer = (("r", rows), ("c", cols)) if k_major(spec) else (("c", cols), ("r", rows))
    body = [
        "e = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
        f"m = e < {size}",
        f"{inner[0]} = e % {inner[1]}",
        f"{outer[0]} = (e // {inner[1]}) % {outer[1]}",
        f"t = (e // {rows * cols}) % {kh * kw}",
        f"g = e // {rows * cols * kh * kw}",
        f"at = (g * {cog} + {co}) * {swo} + {ci} * {swi} + (t // {kw}) * {swh} + (t % {kw}) * {sww}",
        f"v = tl.load(in{w_in} + {w_off} + at, mask=m, other=0.0)",
        *(tf32_round(["v"], "") if rounds_in_pack(spec) else []),
        "tl.store(wp + e, v, mask=m)",
    ]
    return _pack_kernel("pack_w", "wp", spec, ins, outs, body, size)


def _pack_kernel(
    name: str,
    buf: str,
    spec: KernelSpec,
    ins: list[str],
    outs: list[str],
    body: list[str],
    size: int,
) -> tuple[list[str], list[str], tuple[str, str, str]]:
    """A one-pass copy kernel `name` writing `size` elements of `buf` (body: one element a
    lane), its host scratch allocation and its launch."""
    kernel = [
        "@triton.jit",
        f"def {name}({', '.join([*ins, *outs, buf])}, BLOCK: tl.constexpr, "
        "INTERPRET: tl.constexpr):",
        *["    " + b for b in body],
    ]
    dtype = spec.param("operand_dtype")
    scratch = [f"    {buf} = torch.empty({size}, dtype=torch.{dtype}, device=device)"]
    grid = f"(triton.cdiv({size}, {PACK_BLOCK}),)"
    args = (
        f"{', '.join([*ins, *outs])}, {buf}, BLOCK={PACK_BLOCK}, INTERPRET=INTERPRET, num_warps=4"
    )
    return kernel, scratch, (name, grid, args)


def packed_b_ptrs(spec: KernelSpec, dgrad: bool) -> tuple[str, str]:
    """(the program's base into `wp`, the B tile's offset at a step) for the main loop, in the
    loop's names: `g` the group, `rn` the tile's columns [1, BLOCK_N] within the group, `tap`
    (kh * KW + kw) and the step's reduction channels `ci` (forward) / `co` (dgrad)."""
    c_in = spec.param("x_shape")[1]
    groups, c_out = spec.param("groups"), spec.param("c_out")
    cig, cog = c_in // groups, c_out // groups
    taps = spec.param("kernel")[0] * spec.param("kernel")[1]
    rows, cols, k = (cog, cig, "co") if dgrad else (cig, cog, "ci")
    base = f"wp + g * {taps * rows * cols}"
    if k_major(spec):  # wp[g, tap, n, k]: the tile's K contiguous
        return f"{base} + rn * {rows}", f"tap * {rows * cols} + {k}[:, None]"
    return f"{base} + rn", f"(tap * {rows} + {k}[:, None]) * {cols}"


def pack_input(
    spec: KernelSpec, ins: list[str], outs: list[str]
) -> tuple[list[str], list[str], tuple[str, str, str]]:
    """(kernel lines, host scratch lines, launch) writing `xr`: the input x (rounded to tf32
    where `rounds_in_pack`), dense in the layout `input_strides` gives (knob PACK_X)."""
    shape = spec.param("x_shape")
    x_in, x_off, x_strides = spec.param("x")
    size = shape[0] * shape[1] * shape[2] * shape[3]
    # an element e of the dense copy: its coordinate on each axis, read at x's strides
    at = " + ".join(
        f"((e // {st}) % {d}) * {sx}"
        for d, st, sx in zip(shape, input_strides(spec), x_strides, strict=True)
    )
    body = [
        "e = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
        f"m = e < {size}",
        f"v = tl.load(in{x_in} + {x_off} + {at}, mask=m, other=0.0)",
        *(tf32_round(["v"], "") if rounds_in_pack(spec) else []),
        "tl.store(xr + e, v, mask=m)",
    ]
    return _pack_kernel("pack_x", "xr", spec, ins, outs, body, size)


def input_strides(spec: KernelSpec) -> tuple[int, int, int, int]:
    """The strides of `pack_input`'s copy: dense NHWC for the forward (its A tile, channels
    by pixels, contiguous along the reduction), dense NCHW for the weight gradient (its B
    tile, pixels by channels, contiguous along the reduction where a row allows)."""
    _, c, h, w = spec.param("x_shape")
    if spec.template == "conv":
        return h * w * c, 1, w * c, c
    return c * h * w, h * w, w, 1


def packs_input(spec: KernelSpec) -> bool:
    return int(spec.knob("PACK_X")) == 1
