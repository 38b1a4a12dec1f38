"""The convolution backward template ("conv_backward"): the gradients aten.convolution_backward
returns, each an implicit GEMM, with the subgraph's pointwise tail on the input gradient.

dgrad (the input gradient, a transposed convolution): a program owns BLOCK_M input pixels
(rows over N*H*W) by BLOCK_N input channels of one group, and reduces over the group's
C_out/groups output channels at each of the KH*KW taps; input pixel (ih, iw) reads output
pixel ((ih + p - kh*d) / s, ...) where that division is exact and in range (masked otherwise:
with stride 2, three taps in four are masked). Its epilogue (a residual gradient added, ReLU's
mask applied) runs on the fp32 accumulator over the domain (N, C_in, H, W).
wgrad (the weight gradient): a program owns WG_BLOCK_M output channels of a group by
WG_BLOCK_N of its (input channel, kh, kw) columns and reduces over the N*OH*OW output pixels,
WG_BLOCK_K a step: the output gradient tile read as it is stored, the input at each pixel's
tap (zero in the padding). The bias gradient (the output gradient summed per channel) is
summed from the same output-gradient tiles by the programs of the first column tile.
SPLIT_K > 1 programs share the pixels of a tile, each writing float32 partials; `combine`
adds them in split order (deterministic, like the GEMM's split-K) and casts to the weight's
dtype; with SPLIT_K = 1 the wgrad programs store the gradients themselves.
Precision as the forward's (templates/conv.py dot_step). Anchor parameters: those of the
forward (x, weight, x_shape, c_out, kernel, out_hw, stride, padding, dilation, groups,
operand_dtype), grad_out (the output gradient: input index, offset, strides) and grads
((1 weight | 2 bias, output index), ...); the input gradient's outputs are the spec's stores.
Must not: lower aten or launch anything.
"""

from __future__ import annotations

from ..emitter import Emitter
from ..spec import KernelSpec
from ..spec_view import io_names
from .conv import dot_step, tap_step
from .conv_pack import (
    input_strides,
    pack_input,
    pack_weight,
    packed_b_ptrs,
    packs,
    packs_input,
    rounds_in_pack,
)
from .conv_parts import and_, load
from .gemm import tile_coords


def _sizes(spec: KernelSpec) -> tuple[int, int, int, int, int, int]:
    """(N*H*W input pixels, N*OH*OW output pixels, C_in/groups, C_out/groups, KH*KW, groups)."""
    n, c_in, h, w = spec.param("x_shape")
    oh, ow = spec.param("out_hw")
    kh, kw = spec.param("kernel")
    groups = spec.param("groups")
    return n * h * w, n * oh * ow, c_in // groups, spec.param("c_out") // groups, kh * kw, groups


def _dgrad(spec: KernelSpec, ins: list[str], outs: list[str]) -> list[str]:
    m, _, cig, cog, taps, _ = _sizes(spec)
    _, _, h, w = spec.param("x_shape")
    oh, ow = spec.param("out_hw")
    kw = spec.param("kernel")[1]
    (sh, sw), (ph, pw), (dh, dw) = (spec.param(p) for p in ("stride", "padding", "dilation"))
    d_in, d_off, (sdn, sdc, sdh, sdw) = spec.param("grad_out")
    w_in, w_off, (swo, swi, swh, sww) = spec.param("weight")
    bk = int(spec.knob("BLOCK_K"))
    ct = -(-cog // bk)
    coords = ["n_i", "ci", "ih_i", "iw_i"] if len(spec.domain) == 4 else ["n_i", "ci", "iw_i"]
    em = Emitter(spec, coords, [1], spec.param("x_shape")[1], row_var="rm")
    valid = ["row_mask", "oh_n >= 0", f"oh < {oh}", "ow_n >= 0", f"ow < {ow}"]
    valid += [f"oh_n % {sh} == 0"] if sh > 1 else []
    valid += [f"ow_n % {sw} == 0"] if sw > 1 else []
    co_a, co_b = ([], []) if cog % bk == 0 else ([f"co[None, :] < {cog}"], [f"co[:, None] < {cog}"])
    b_mask = and_(co_b + ([] if cig % int(spec.knob("BLOCK_N")) == 0 else ["col_mask"]))
    packed = packs(spec)
    if packed:  # B from the repacked weight (templates/conv_pack.py): contiguous along N
        w_base, b_at = packed_b_ptrs(spec, dgrad=True)
    else:
        w_base = f"in{w_in} + {w_off} + g * {cog * swo} + rn * {swi}"
        b_at = f"co[:, None] * {swo} + kh * {swh} + kw * {sww}"
    body = [
        "tile = tl.program_id(0)",
        "g = tl.program_id(1)",
        f"num_pid_m = tl.cdiv({m}, BLOCK_M)",
        f"num_pid_n = tl.cdiv({cig}, BLOCK_N)",
        *tile_coords("tile", ""),
        f"ci = g * {cig} + rn",
        f"row_mask = rm < {m}",
        f"col_mask = rn < {cig}",
        "mask = row_mask & col_mask",
        f"n_i = rm // {h * w}",
        f"ih_i = (rm % {h * w}) // {w}",
        f"iw_i = rm % {w}",
        "rk = tl.arange(0, BLOCK_K)",
        f"dy_rows = in{d_in} + {d_off} + n_i * {sdn} + g * {cog * sdc}",
        f"w_cols = {w_base}",
        "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
        f"# {taps} taps x {ct} blocks of {bk} of the {cog} output channels of a group",
        f"for kt in range(0, {taps * ct}):",
        *tap_step(taps, ct, kw),
        f"    oh_n = ih_i + {ph} - kh * {dh}",
        f"    ow_n = iw_i + {pw} - kw * {dw}",
        f"    oh = oh_n // {sh}",
        f"    ow = ow_n // {sw}",
        "    co = c0 + rk",
        f"    a = {load(f'dy_rows + oh * {sdh} + ow * {sdw} + co[None, :] * {sdc}', and_(valid + co_a))}",
        f"    b = {load(f'w_cols + {b_at}', b_mask)}",
        *dot_step(spec, "acc", round_b=not (packed and rounds_in_pack(spec))),
    ]
    em.local_memo[("A", 0)] = "acc"
    for j, (ref, *_) in enumerate(spec.stores):
        if ref[0] != "A" or ref[1] == 0:
            em.store(j, f"out{j}")
    consts = "BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, "
    return [
        *em.helper_source(),
        "@triton.jit",
        f"def dgrad({', '.join([*ins, *outs, *(['wp'] if packed else [])])}, {consts}"
        "GROUP_M: tl.constexpr, "
        "INTERPRET: tl.constexpr):",
        *["    " + b for b in body],
        *em.lines,
    ]


def grad_outputs(spec: KernelSpec) -> dict[int, tuple[int, tuple[int, ...]]]:
    """1 (weight) / 2 (bias) -> (output index, its strides); a 1-D convolution's weight
    gradient with a height stride of 0 (its kh is always 0)."""
    out = {}
    for which, j in spec.param("grads"):
        strides = tuple(spec.outputs[j][1])
        out[which] = (
            j,
            (*strides[:2], 0, strides[2]) if which == 1 and len(strides) == 3 else strides,
        )
    return out


def grad_value(spec: KernelSpec, value: str, j: int) -> str:
    """`value` (float32) stored as aten's gradient: rounded to the operands' dtype (the
    gradient's own), then to output `j`'s (a cast the graph applies to the gradient, as
    autocast's bfloat16 gradient to a float32 parameter's)."""
    dt = spec.param("operand_dtype")
    rounded = value if dt == "float32" else f"{value}.to(tl.{dt})"
    return f"{rounded}.to(out{j}.dtype.element_ty)"


def weight_offset(strides: tuple[int, ...], co: str, ci: str, kh: str, kw: str) -> str:
    return f"{co} * {strides[0]} + {ci} * {strides[1]} + {kh} * {strides[2]} + {kw} * {strides[3]}"


def _wgrad(spec: KernelSpec, ins: list[str], outs: list[str]) -> list[str]:
    """A program: one tap (kh, kw), WG_BLOCK_M output channels by WG_BLOCK_N input channels.
    With the tap fixed a program's index math is per pixel ([WG_BLOCK_K]) and per channel,
    never per element, and its input tile is contiguous along the channels in channels-last
    (along the pixels in NCHW)."""
    _, p, cig, cog, taps, _ = _sizes(spec)
    _, _, h, w = spec.param("x_shape")
    oh, ow = spec.param("out_hw")
    kw_ = spec.param("kernel")[1]
    (sh, sw), (ph, pw), (dh, dw) = (spec.param(q) for q in ("stride", "padding", "dilation"))
    d_in, d_off, (sdn, sdc, sdh, sdw) = spec.param("grad_out")
    x_in, x_off, (sxn, sxc, sxh, sxw) = spec.param("x")
    x_base = f"in{x_in} + {x_off}"
    packed = packs_input(spec)
    if packed:  # B from the input's dense NCHW copy, rounded there (conv_pack.pack_input)
        x_base, (sxn, sxc, sxh, sxw) = "xr", input_strides(spec)
    grads = grad_outputs(spec)
    split = int(spec.knob("SPLIT_K"))
    wbm, wbn, wbk = (int(spec.knob(f"WG_BLOCK_{a}")) for a in "MNK")
    rows = [] if cog % wbm == 0 else ["row_mask"]
    cols = [] if cig % wbn == 0 else ["col_mask"]
    tail = [] if p % wbk == 0 else [f"q < {p}"]
    bounds = (["ih >= 0", f"ih < {h}"] if ph else []) + (["iw >= 0", f"iw < {w}"] if pw else [])
    a_mask = and_(rows + [f"({m})[None, :]" for m in tail])
    b_mask = and_([f"({m})[:, None]" for m in tail + bounds] + cols)
    bias = 2 in grads
    body = [
        "tile = tl.program_id(0)",
        "g = tl.program_id(1)",
        "pid_k = tl.program_id(2)",
        f"ci_tiles = tl.cdiv({cig}, WG_BLOCK_N)",
        f"pid_n = tile % ({taps} * ci_tiles)",
        f"rm = (tile // ({taps} * ci_tiles)) * WG_BLOCK_M + tl.arange(0, WG_BLOCK_M)[:, None]",
        "tap = pid_n // ci_tiles",
        "ci = (pid_n % ci_tiles) * WG_BLOCK_N + tl.arange(0, WG_BLOCK_N)[None, :]",
        f"kh = tap // {kw_}",
        f"kw = tap % {kw_}",
        f"row_mask = rm < {cog}",
        f"col_mask = ci < {cig}",
        "mask = row_mask & col_mask",
        "rk = tl.arange(0, WG_BLOCK_K)",
        f"dy_rows = in{d_in} + {d_off} + (g * {cog} + rm) * {sdc}",
        f"x_cols = {x_base} + (g * {cig} + ci) * {sxc}",
        "acc = tl.zeros((WG_BLOCK_M, WG_BLOCK_N), dtype=tl.float32)",
        "db = tl.zeros((WG_BLOCK_M, 1), dtype=tl.float32)",
        f"# the {p} output pixels, WG_BLOCK_K a step, split over SPLIT_K programs",
        f"for kt in range(pid_k, tl.cdiv({p}, WG_BLOCK_K), SPLIT_K):",
        "    q = kt * WG_BLOCK_K + rk",
        f"    n_q = q // {oh * ow}",
        f"    oh_q = (q % {oh * ow}) // {ow}",
        f"    ow_q = q % {ow}",
        f"    ih = oh_q * {sh} + (kh * {dh} - {ph})",
        f"    iw = ow_q * {sw} + (kw * {dw} - {pw})",
        f"    a = {load(f'dy_rows + (n_q * {sdn} + oh_q * {sdh} + ow_q * {sdw})[None, :]', a_mask)}",
        f"    b = {load(f'x_cols + (n_q * {sxn} + ih * {sxh} + iw * {sxw})[:, None]', b_mask)}",
        *(["    db += tl.sum(a.to(tl.float32), axis=1)[:, None]"] if bias else []),
        *dot_step(spec, "acc", round_b=not (packed and rounds_in_pack(spec))),
    ]
    return _wgrad_stores(spec, body, ins, outs, split)


def _wgrad_stores(
    spec: KernelSpec, body: list[str], ins: list[str], outs: list[str], split: int
) -> list[str]:
    """The weight (and bias) gradient's tile stored, or its float32 partials (SPLIT_K > 1, the
    columns in (tap, input channel) order) for `combine`."""
    _, _, cig, cog, taps, _ = _sizes(spec)
    grads = grad_outputs(spec)
    first_col = "(pid_n == 0)"
    if split == 1:
        if 1 in grads:
            j, strides = grads[1]
            at = weight_offset(strides, f"(g * {cog} + rm)", "ci", "kh", "kw")
            body.append(f"tl.store(out{j} + {at}, {grad_value(spec, 'acc', j)}, mask=mask)")
        if 2 in grads:
            j, (sb,) = grads[2]
            body += [
                f"if {first_col}:",
                f"    tl.store(out{j} + (g * {cog} + rm) * {sb}, {grad_value(spec, 'db', j)}, "
                "mask=row_mask)",
            ]
    else:
        c_out, cols = spec.param("c_out"), cig * taps
        size = c_out * cols
        body += [
            f"tl.store(partial_w + pid_k * {size} + (g * {cog} + rm) * {cols} + tap * {cig} + ci, "
            "acc, mask=mask)",
            *(
                [
                    f"if {first_col}:",
                    f"    tl.store(partial_b + pid_k * {c_out} + g * {cog} + rm, db, mask=row_mask)",
                ]
                if 2 in grads
                else []
            ),
        ]
    consts = "WG_BLOCK_M: tl.constexpr, WG_BLOCK_N: tl.constexpr, WG_BLOCK_K: tl.constexpr, "
    params = [*ins, *outs, "partial_w", "partial_b", *(["xr"] if packs_input(spec) else [])]
    return [
        "@triton.jit",
        f"def wgrad({', '.join(params)}, {consts}SPLIT_K: tl.constexpr, INTERPRET: tl.constexpr):",
        *["    " + b for b in body],
    ]


def combine(spec: KernelSpec, ins: list[str], outs: list[str]) -> list[str]:
    """The split wgrad's partials added in split order, stored at the gradients' strides."""
    _, _, cig, _, taps, _ = _sizes(spec)
    kw = spec.param("kernel")[1]
    c_out = spec.param("c_out")
    size = c_out * cig * taps
    grads = grad_outputs(spec)
    body = ["e = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)"]
    if 1 in grads:
        j, strides = grads[1]
        at = weight_offset(strides, f"(e // {cig * taps})", f"(e % {cig})", "kh", "kw")
        body += [
            f"m = e < {size}",
            "acc = tl.load(partial_w + e, mask=m, other=0.0)",
            "for s in tl.static_range(1, SPLIT_K):  # in split order: the same sum every run",
            f"    acc += tl.load(partial_w + s * {size} + e, mask=m, other=0.0)",
            f"tap = (e // {cig}) % {taps}",
            f"kh = tap // {kw}",
            f"kw = tap % {kw}",
            f"tl.store(out{j} + {at}, {grad_value(spec, 'acc', j)}, mask=m)",
        ]
    if 2 in grads:
        j, (sb,) = grads[2]
        body += [
            f"mb = e < {c_out}",
            "db = tl.load(partial_b + e, mask=mb, other=0.0)",
            "for s in tl.static_range(1, SPLIT_K):",
            f"    db += tl.load(partial_b + s * {c_out} + e, mask=mb, other=0.0)",
            f"tl.store(out{j} + e * {sb}, {grad_value(spec, 'db', j)}, mask=mb)",
        ]
    return [
        "@triton.jit",
        f"def combine({', '.join([*ins, *outs, 'partial_w', 'partial_b'])}, "
        "BLOCK: tl.constexpr, SPLIT_K: tl.constexpr):",
        *["    " + b for b in body],
    ]


COMBINE_BLOCK = 1024  # gradient elements per combine program


def add_combine(
    spec: KernelSpec, ins: list[str], outs: list[str], args: str, elements: int, split: int
) -> tuple[list[str], tuple[str, str, str]]:
    """The combine kernel's source and its launch over `elements` weight-gradient elements,
    adding the `split` partials the wgrad launch (`args`) wrote, in split order."""
    grid = f"(triton.cdiv({elements}, {COMBINE_BLOCK}),)"
    launch = f"{args}, BLOCK={COMBINE_BLOCK}, SPLIT_K={split}, num_warps=4"
    return [*combine(spec, ins, outs), "", ""], ("combine", grid, launch)


def render_conv_backward(spec: KernelSpec) -> tuple[str, list[str], list[tuple[str, str, str]]]:
    """(kernel sources, host scratch lines, launches) for render.render_launches."""
    m, _, cig, cog, taps, groups = _sizes(spec)
    ins, outs = io_names(spec)
    grads = grad_outputs(spec)
    split = int(spec.knob("SPLIT_K"))
    warps, stages = spec.knob("num_warps"), spec.knob("num_stages")
    launch = f"num_warps={warps}, num_stages={stages}"
    kernels: list[str] = []
    launches = []
    scratch: list[str] = []
    if any(ref[0] != "A" or ref[1] == 0 for ref, *_ in spec.stores):
        kernels += [*_dgrad(spec, ins, outs), "", ""]
        knobs = ", ".join(
            f"{k}={spec.knob(k)!r}" for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")
        )
        grid = f"(triton.cdiv({m}, {spec.knob('BLOCK_M')}) * triton.cdiv({cig}, {spec.knob('BLOCK_N')}), {groups})"
        params = [*ins, *outs]
        if packs(spec):
            pack, scratch, pack_launch = pack_weight(spec, ins, outs, dgrad=True)
            kernels = [*pack, "", "", *kernels]
            launches.append(pack_launch)
            params.append("wp")
        launches.append(
            ("dgrad", grid, f"{', '.join(params)}, {knobs}, INTERPRET=INTERPRET, {launch}")
        )
    if grads:
        c_out, cols = spec.param("c_out"), cig * taps
        shape = (c_out * cols * split, c_out * split) if split > 1 else (1, 1)
        scratch += [
            f"    partial_w = torch.empty({shape[0]}, dtype=torch.float32, device=device)",
            f"    partial_b = torch.empty({shape[1]}, dtype=torch.float32, device=device)",
        ]
        kernels += [*_wgrad(spec, ins, outs), "", ""]
        knobs = ", ".join(
            f"{k}={spec.knob(k)!r}" for k in ("WG_BLOCK_M", "WG_BLOCK_N", "WG_BLOCK_K", "SPLIT_K")
        )
        grid = (
            f"(triton.cdiv({cog}, {spec.knob('WG_BLOCK_M')}) * {taps} * triton.cdiv({cig}, "
            f"{spec.knob('WG_BLOCK_N')}), {groups}, {split})"
        )
        args = f"{', '.join([*ins, *outs])}, partial_w, partial_b"
        x_args = ""
        if packs_input(spec):
            pack, pack_scratch, pack_launch = pack_input(spec, ins, outs)
            kernels += [*pack, "", ""]
            scratch += pack_scratch
            launches.append(pack_launch)
            x_args = ", xr"
        launches.append(("wgrad", grid, f"{args}{x_args}, {knobs}, INTERPRET=INTERPRET, {launch}"))
        if split > 1:
            source, combined = add_combine(spec, ins, outs, args, c_out * cols, split)
            kernels += source
            launches.append(combined)
    return "\n".join(kernels), scratch, launches
