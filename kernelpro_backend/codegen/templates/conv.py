"""The convolution forward templates: 2-D convolution with the fused epilogue (bias, activation,
residual: the subgraph's pointwise tail) applied to the fp32 accumulator tile.

"conv" is an implicit GEMM per group: a program owns BLOCK_M output pixels (rows over
N*OH*OW) by BLOCK_N output channels of one group (grid axis 1), and reduces over the group's
C_in/groups input channels at each of the KH*KW taps: one loop of KH*KW*ceil(Cin_g/BLOCK_K)
steps, the tap and channel block of a step found by scalar division, so the loop is one
software pipeline (num_stages). A step loads the input tile x[n, ci, oh*s - p + kh*d, ...]
(zero where the tap falls in the padding) and the weight tile w[co, ci, kh, kw], both through
strides: NCHW and channels-last (NHWC) inputs, weights and outputs are other strides of the
same kernel. fp32 operands use the spec's dot precision (IEEE unless the spec says tf32 or
tf32x3; tf32 rounded to nearest as cuDNN does: gemm.tf32_rounding); bf16/fp16 accumulate in
fp32. Masks only where a tile or a tap can leave the tensor (no padding: no spatial masks).
"conv_depthwise" is direct: one input channel per group (depthwise, any channel multiplier),
a program's BLOCK_M pixels x BLOCK_N channels accumulate x * w over the KH*KW taps unrolled,
with fp32 FMAs (no tensor cores: a depthwise GEMM's K is KH*KW and its N one channel).
Anchor parameters (lowering/lower_conv.py sets them): x and weight (input index, storage
offset, strides), x_shape (N, C_in, H, W), c_out, kernel (KH, KW), out_hw (OH, OW), stride,
padding, dilation (pairs), groups, operand_dtype. The domain is the output (N, C_out, OH, OW);
a 1-D convolution is a 2-D one of height 1 (its domain (N, C_out, OW)).
Must not: lower aten or launch anything.
"""

from __future__ import annotations

from ..emitter import Emitter
from ..spec import KernelSpec
from ..spec_view import io_names
from .conv_pack import (
    input_strides,
    pack_input,
    pack_weight,
    packed_b_ptrs,
    packs,
    packs_input,
    rounds_in_pack,
    tf32_round,
)
from .conv_parts import and_, load, wide
from .conv_rows import direct_rows
from .gemm import tf32_rounding, tile_coords


def pixels(spec: KernelSpec) -> int:
    """M: the output pixels N * OH * OW the rows of the implicit GEMM run over."""
    oh, ow = spec.param("out_hw")
    return int(spec.param("x_shape")[0]) * oh * ow


def pixel_coords(spec: KernelSpec, i64: str) -> list[str]:
    """The program's output pixels (`rm`, [BLOCK_M, 1]) split into batch `n_i`, row `oh_i`
    and column `ow_i`, and where each tap's input row/column starts (`ih0`, `iw0`)."""
    oh, ow = spec.param("out_hw")
    sh, sw = spec.param("stride")
    ph, pw = spec.param("padding")
    return [
        f"n_i = rm // {oh * ow}",
        f"oh_i = (rm % {oh * ow}) // {ow}",
        f"ow_i = rm % {ow}",
        f"ih0 = oh_i * {sh} - {ph}",
        f"iw0 = ow_i * {sw} - {pw}",
    ]


def tap_mask(spec: KernelSpec) -> list[str]:
    """Bounds of the tap's input row `ih` and column `iw` on the axes with padding: without
    it every tap of a valid output pixel lies inside the input."""
    h, w = spec.param("x_shape")[2:]
    ph, pw = spec.param("padding")
    out = []
    if ph:
        out += ["ih >= 0", f"ih < {h}"]
    if pw:
        out += ["iw >= 0", f"iw < {w}"]
    return out


def _gemm_loop(spec: KernelSpec) -> list[str]:
    """From the tile's rows and channels to the finished fp32 accumulator `acc`."""
    m = pixels(spec)
    c_in = spec.param("x_shape")[1]
    groups, c_out = spec.param("groups"), spec.param("c_out")
    cig, cog = c_in // groups, c_out // groups
    kh, kw = spec.param("kernel")
    dh, dw = spec.param("dilation")
    x_in, x_off, (sxn, sxc, sxh, sxw) = spec.param("x")
    x_base = f"in{x_in} + {x_off}"
    packed_x = packs_input(spec)
    if packed_x:  # A from the input's dense NHWC copy, rounded there (conv_pack.pack_input)
        x_base, (sxn, sxc, sxh, sxw) = "xr", input_strides(spec)
    w_in, w_off, (swo, swi, swh, sww) = spec.param("weight")
    bk = int(spec.knob("BLOCK_K"))
    ct = -(-cig // bk)
    even_k, even_n = cig % bk == 0, cog % int(spec.knob("BLOCK_N")) == 0
    rows = [] if m % int(spec.knob("BLOCK_M")) == 0 else ["row_mask"]
    ci_a, ci_b = (
        ([] if even_k else ["ci[None, :] < " + str(cig)]),
        ([] if even_k else ["ci[:, None] < " + str(cig)]),
    )
    a_mask = and_(rows + tap_mask(spec) + ci_a)
    b_mask = and_(ci_b + ([] if even_n else [f"rn < {cog}"]))
    taps = kh * kw
    packed = packs(spec)
    if packed:  # B from the repacked weight (templates/conv_pack.py): contiguous along N
        w_base, b_at = packed_b_ptrs(spec, dgrad=False)
    else:
        w_base = f"in{w_in} + {w_off} + co * {swo}"
        b_at = f"kh * {swh} + kw * {sww} + ci[:, None] * {swi}"
    return [
        "rk = tl.arange(0, BLOCK_K)",
        f"x_rows = {x_base} + n_i * {sxn} + g * {cig * sxc}",
        f"w_cols = {w_base}",
        "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
        f"# {taps} taps x {ct} blocks of {bk} of the {cig} input channels a group reads,",
        "# channels innermost (contiguous in channels-last), the tap found by scalar division",
        f"for kt in range(0, {taps * ct}):",
        *tap_step(taps, ct, kw),
        f"    ih = ih0 + kh * {dh}",
        f"    iw = iw0 + kw * {dw}",
        "    ci = c0 + rk",
        f"    a = {load(f'x_rows + ih * {sxh} + iw * {sxw} + ci[None, :] * {sxc}', a_mask)}",
        f"    b = {load(f'w_cols + {b_at}', b_mask)}",
        *dot_step(
            spec,
            "acc",
            round_b=not (packed and rounds_in_pack(spec)),
            round_a=not (packed_x and rounds_in_pack(spec)),
        ),
    ]


def tap_step(taps: int, ct: int, kw: int) -> list[str]:
    """A main-loop step `kt`'s first reduction channel `c0`, its tap (`tap` = kh * KW + kw)
    and the tap's `kh`, `kw`: `ct` channel blocks a tap."""
    if taps == 1:
        return ["    c0 = kt * BLOCK_K", "    tap = 0", "    kh = 0", "    kw = 0"]
    return [
        "    c0 = 0" if ct == 1 else f"    c0 = (kt % {ct}) * BLOCK_K",
        "    tap = kt" if ct == 1 else f"    tap = kt // {ct}",
        f"    kh = tap // {kw}",
        f"    kw = tap % {kw}",
    ]


def dot_step(spec: KernelSpec, acc: str, round_b: bool = True, round_a: bool = True) -> list[str]:
    """A main loop's `acc += a @ b` (its body indented once): bf16/fp16 operands widened under
    the interpreter, float32 ones at the spec's dot precision (tf32 rounded to nearest; not
    the operands a pre-pass rounded already: `round_a`, `round_b` False)."""
    low = spec.param("operand_dtype") != "float32"
    dot_kw = "" if low else f', input_precision="{spec.precision}"'
    rounded = [x for x, r in (("a", round_a), ("b", round_b)) if r]
    if low or spec.precision != "tf32":
        tf32 = []
    elif len(rounded) == 2:
        tf32 = tf32_rounding()
    else:
        done = " and ".join(x.upper() for x in "ab" if x not in rounded)
        tf32 = [f"    # {done}: rounded by the repack", *(tf32_round(rounded) if rounded else [])]
    widen = [
        "    if INTERPRET:  # the CPU interpreter multiplies bf16/fp16 wrongly; widen there",
        "        a = a.to(tl.float32)",
        "        b = b.to(tl.float32)",
    ]
    return [*(widen if low else []), *tf32, f"    {acc} = tl.dot(a, b, {acc}{dot_kw})"]


def _direct_loop(spec: KernelSpec) -> list[str]:
    """Depthwise: acc[m, c] += x[n, c // mult, ih, iw] * w[c, 0, kh, kw] over the taps."""
    c_in = spec.param("x_shape")[1]
    groups, c_out = spec.param("groups"), spec.param("c_out")
    mult = c_out // groups
    assert c_in == groups, "conv_depthwise reads one input channel per group"
    kh, kw = spec.param("kernel")
    dh, dw = spec.param("dilation")
    x_in, x_off, (sxn, sxc, sxh, sxw) = spec.param("x")
    w_in, w_off, (swo, _, swh, sww) = spec.param("weight")
    ci = "co" if mult == 1 else f"(co // {mult})"
    a_mask = and_(["mask", *tap_mask(spec)])
    return [
        f"x_rows = in{x_in} + {x_off} + n_i * {sxn} + {ci} * {sxc}",
        f"w_cols = in{w_in} + {w_off} + co * {swo}",
        "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
        f"for kh in tl.static_range({kh}):",
        f"    ih = ih0 + kh * {dh}",
        f"    for kw in tl.static_range({kw}):",
        f"        iw = iw0 + kw * {dw}",
        f"        a = {load(f'x_rows + ih * {sxh} + iw * {sxw}', a_mask)}.to(tl.float32)",
        f"        b = {load(f'w_cols + kh * {swh} + kw * {sww}', 'col_mask')}.to(tl.float32)",
        "        acc += a * b",
    ]


def render_conv(spec: KernelSpec) -> tuple[str, list[str], list[tuple[str, str, str]]]:
    """(kernel source, host scratch lines, launches) for render.render_launches."""
    depthwise = spec.template == "conv_depthwise"
    m = pixels(spec)
    groups, c_out = spec.param("groups"), spec.param("c_out")
    cog = c_out if depthwise else c_out // groups
    i64 = ".to(tl.int64)" if wide(spec) else ""
    # domain dims (N, C_out, OH, OW), or (N, C_out, OW) of a 1-D convolution, at the tile:
    # the epilogue's loads and stores use them
    coords = ["n_i", "co", "oh_i", "ow_i"] if len(spec.domain) == 4 else ["n_i", "co", "ow_i"]
    em = Emitter(spec, coords, [1], c_out, row_var="rm")
    ins, outs = io_names(spec)
    consts = ["BLOCK_M", "BLOCK_N"] + ([] if depthwise else ["BLOCK_K", "GROUP_M"])
    packed = not depthwise and packs(spec)
    packed_x = not depthwise and packs_input(spec)
    params = [*ins, *outs, *(["wp"] if packed else []), *(["xr"] if packed_x else [])]
    head = [
        "@triton.jit",
        f"def kernel({', '.join(params)}, "
        + ", ".join(f"{c}: tl.constexpr" for c in [*consts, "INTERPRET"])
        + "):",
    ]
    if depthwise:
        tile = [
            "pid_m = tl.program_id(0)",
            "pid_n = tl.program_id(1)",
            f"rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]){i64}",
            f"rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]){i64}",
            "co = rn",
        ]
    else:
        tile = [
            "tile = tl.program_id(0)",
            f"g = tl.program_id(1){i64}",
            f"num_pid_m = tl.cdiv({m}, BLOCK_M)",
            f"num_pid_n = tl.cdiv({cog}, BLOCK_N)",
            *tile_coords("tile", i64),
            f"co = g * {cog} + rn",
        ]
    rows = int(spec.knob("ROWS")) if depthwise else 0
    if rows:
        source, programs = direct_rows(spec, em, head)
    else:
        body = [
            *tile,
            f"row_mask = rm < {m}",
            f"col_mask = rn < {cog}",
            "mask = row_mask & col_mask",
            *pixel_coords(spec, i64),
            *(_direct_loop(spec) if depthwise else _gemm_loop(spec)),
        ]
        em.local_memo[("A", 0)] = "acc"
        for j in range(len(spec.stores)):
            em.store(j, f"out{j}")
        source = "\n".join(em.helper_source() + head + ["    " + b for b in body] + em.lines)
        programs = -(-m // int(spec.knob("BLOCK_M")))
    knobs = {c: spec.knob(c) for c in consts}
    args = ", ".join(
        [*params, *(f"{k}={v!r}" for k, v in knobs.items()), "INTERPRET=INTERPRET"]
        + [f"num_warps={spec.knob('num_warps')}", f"num_stages={spec.knob('num_stages')}"]
    )
    bm, bn = knobs["BLOCK_M"], knobs["BLOCK_N"]
    grid = (
        f"({programs}, triton.cdiv({c_out}, {bn}))"
        if depthwise
        else f"(triton.cdiv({m}, {bm}) * triton.cdiv({cog}, {bn}), {groups})"
    )
    kernels: list[str] = []
    scratch: list[str] = []
    launches = []
    for lines, more, launch in (
        *([pack_weight(spec, ins, outs, dgrad=False)] if packed else []),
        *([pack_input(spec, ins, outs)] if packed_x else []),
    ):
        kernels += [*lines, "", ""]
        scratch += more
        launches.append(launch)
    return "\n".join([*kernels, source]), scratch, [*launches, ("kernel", grid, args)]
