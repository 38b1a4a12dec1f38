"""The depthwise convolution backward template ("conv_depthwise_backward"): the gradients
aten.convolution_backward returns for a convolution whose groups each read one input channel
(groups == C_in, any channel multiplier M = C_out / C_in), computed directly as the forward
"conv_depthwise" is (templates/conv.py): float32 FMAs, no implicit GEMM (its K would be M and
its N one channel), memory-bound.

dgrad (the input gradient): a program owns BLOCK_M input pixels (rows over N*H*W) by BLOCK_N
input channels and sums grad_y[n, c*M + m, oh, ow] * w[c*M + m, 0, kh, kw] over the KH*KW taps
(unrolled) and the M output channels of its group, where oh = (ih + p - kh*d) / s is exact and
in range (masked otherwise); the subgraph's pointwise tail (a residual's gradient added, an
activation's mask) runs on the float32 accumulator over the domain (N, C_in, H, W).
dgrad by rows (knob ROWS > 0; stride 1, dilation 1, one output channel a group, 2-D): a
program owns ROWS input rows x BLOCK_M columns of one image by BLOCK_N channels, one float32
accumulator tile a row; for each kernel column it loads each output-gradient row the tile needs
once and adds it into every input row it feeds (up to KH), so an input pixel costs
KW * (ROWS + KH - 1) / ROWS loads instead of KH * KW (12.25 for a 7x7 at 8 rows). On ConvNeXt's
channels-last 7x7 a prototype of this ran 2.1-2.8x faster than cuDNN's NHWC input gradient,
which the flat tile only ties (H100, BENCHMARKS.md). The tail runs on each row's accumulator.
wgrad by rows (knob WG_ROWS > 0, where dgrad by rows applies): a step is WG_ROWS output rows of
WG_BLOCK_M columns of one image; their output-gradient rows are held, and each input row is
loaded once a kernel column and multiplied into every (row, tap) pair it meets: 1 + KW *
(WG_ROWS + KH - 1) / WG_ROWS loads an output pixel instead of 1 + KH * KW. Not yet timed.
wgrad (the weight gradient): a program owns WG_BLOCK_N output channels and WG_BLOCK_M output
pixels a step, and keeps one float32 accumulator tile per tap (KH*KW named tiles, so the
output gradient is read once and the input's KH*KW shifted tiles come from L1); the pixels
are split over SPLIT_K programs, each summing its tiles at the end. The bias gradient (the
output gradient summed per channel) rides along. With SPLIT_K > 1 each program writes float32
partials and conv_bwd.combine adds them in split order (deterministic: no atomics) and casts to
the weight's dtype; with SPLIT_K = 1 the wgrad programs store the gradients themselves.
Anchor parameters: those of "conv_backward" (templates/conv_bwd.py); a 1-D convolution is a
2-D one of height 1 (its domain (N, C_in, W)).
Must not: lower aten or launch anything.
"""

from __future__ import annotations

from ..emitter import Emitter
from ..spec import KernelSpec
from ..spec_view import io_names
from .conv_bwd import add_combine, grad_outputs, grad_value, weight_offset
from .conv_parts import and_, load, wide
from .conv_rows import row_sweep, rows_body, rows_grid, rows_stores


def _geometry(spec: KernelSpec) -> tuple:
    """(x_shape, out_hw, kernel, stride, padding, dilation, multiplier)."""
    x_shape = spec.param("x_shape")
    names = ("out_hw", "kernel", "stride", "padding", "dilation")
    return (x_shape, *(spec.param(p) for p in names), spec.param("c_out") // x_shape[1])


def by_rows(spec: KernelSpec) -> int:
    """The dgrad's rows a program (knob ROWS; 0: the flat pixel tile)."""
    return int(spec.knob("ROWS"))


def _dgrad(spec: KernelSpec, ins: list[str], outs: list[str]) -> list[str]:
    if by_rows(spec):
        return _dgrad_rows(spec, ins, outs)
    (n, c_in, h, w), (oh, ow), (kh_, kw_), (sh, sw), (ph, pw), (dh, dw), mult = _geometry(spec)
    d_in, d_off, (sdn, sdc, sdh, sdw) = spec.param("grad_out")
    w_in, w_off, (swo, _, swh, sww) = spec.param("weight")
    i64 = ".to(tl.int64)" if wide(spec) else ""
    valid_h = ["oh_n >= 0", f"oh < {oh}"] + ([f"oh_n % {sh} == 0"] if sh > 1 else [])
    valid_w = ["ow_n >= 0", f"ow < {ow}"] + ([f"ow_n % {sw} == 0"] if sw > 1 else [])
    co = "ci" if mult == 1 else f"(ci * {mult} + m)"
    taps = [
        f"for kh in tl.static_range({kh_}):",
        f"    oh_n = ih_i + {ph} - kh * {dh}",
        f"    oh = oh_n // {sh}",
        f"    valid_h = {and_(valid_h)}",
        f"    for kw in tl.static_range({kw_}):",
        f"        ow_n = iw_i + {pw} - kw * {dw}",
        f"        ow = ow_n // {sw}",
        f"        valid = mask & valid_h & {and_(valid_w)}",
        *(["        for m in tl.static_range(" + str(mult) + "):"] if mult > 1 else []),
    ]
    pad = " " * (12 if mult > 1 else 8)
    dy = f"dy_rows + {co} * {sdc} + oh * {sdh} + ow * {sdw}"
    taps += [
        f"{pad}a = {load(dy, 'valid')}.to(tl.float32)",
        f"{pad}b = {load(f'w_cols + {co} * {swo} + kh * {swh} + kw * {sww}', 'col_mask')}"
        ".to(tl.float32)",
        f"{pad}acc += a * b",
    ]
    body = [
        "pid_m = tl.program_id(0)",
        "pid_n = tl.program_id(1)",
        f"rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]){i64}",
        f"ci = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]){i64}",
        f"row_mask = rm < {n * h * w}",
        f"col_mask = ci < {c_in}",
        "mask = row_mask & col_mask",
        f"n_i = rm // {h * w}",
        f"ih_i = (rm % {h * w}) // {w}",
        f"iw_i = rm % {w}",
        f"dy_rows = in{d_in} + {d_off} + n_i * {sdn}",
        f"w_cols = in{w_in} + {w_off}",
        "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
        f"# {kh_}x{kw_} taps unrolled, {mult} output channel(s) a tap",
        *taps,
    ]
    coords = ["n_i", "ci", "ih_i", "iw_i"] if len(spec.domain) == 4 else ["n_i", "ci", "iw_i"]
    em = Emitter(spec, coords, [1], c_in, row_var="rm")
    em.local_memo[("A", 0)] = "acc"
    for j, (ref, *_) in enumerate(spec.stores):
        if ref[0] != "A" or ref[1] == 0:
            em.store(j, f"out{j}")
    return [
        *em.helper_source(),
        "@triton.jit",
        f"def dgrad({', '.join([*ins, *outs])}, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, "
        "INTERPRET: tl.constexpr):",
        *["    " + b for b in body],
        *em.lines,
    ]


def _dgrad_rows(spec: KernelSpec, ins: list[str], outs: list[str]) -> list[str]:
    """dgrad by rows (module docstring); conv_rules checks stride 1, dilation 1, M = 1, 2-D."""
    _, c_in, h, w = spec.param("x_shape")
    rows = by_rows(spec)
    # the forward of the output gradient by the flipped kernel, padding K - 1 - P
    body = rows_body(spec, rows, ("ih0", "iw_i", "ci"), "dy_rows", flip=True)
    coords = ["n_i", "ci", "ih_i", "iw_i"]
    em = Emitter(spec, coords, [1], c_in, row_var="rm")
    em.local_memo[("A", 0)] = "acc"
    for j, (ref, *_) in enumerate(spec.stores):
        if ref[0] != "A" or ref[1] == 0:
            em.store(j, f"out{j}")
    body += rows_stores(em, rows, (h, w), ("ih0", "iw_i", "ih_i"))
    return [
        *em.helper_source(),
        "@triton.jit",
        f"def dgrad({', '.join([*ins, *outs])}, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, "
        "INTERPRET: tl.constexpr):",
        *["    " + b for b in body],
    ]


def _wgrad_taps(spec: KernelSpec) -> list[str]:
    """A pixel step's input tile at each tap, multiplied into the tap's accumulator."""
    (_, _, h, w), _, (kh_, kw_), _, (ph, pw), (dh, dw), _ = _geometry(spec)
    x_in, x_off, (_, _, sxh, sxw) = spec.param("x")
    lines = []
    for kh in range(kh_):
        ih = f"ih0 + {kh * dh}" if kh * dh else "ih0"
        rows = [f"({ih}) >= 0", f"({ih}) < {h}"] if ph else []  # no padding: always inside
        for kw in range(kw_):
            iw = f"iw0 + {kw * dw}" if kw * dw else "iw0"
            cols = [f"({iw}) >= 0", f"({iw}) < {w}"] if pw else []
            t = kh * kw_ + kw
            mask = and_(["mask", *rows, *cols])
            ptr = f"x_rows + ({ih}) * {sxh} + ({iw}) * {sxw}"
            lines.append(f"    acc_{t} += a * {load(ptr, mask)}.to(tl.float32)")
    return lines


def _wgrad(spec: KernelSpec, ins: list[str], outs: list[str]) -> list[str]:
    _, _, (kh_, kw_), _, _, _, mult = _geometry(spec)
    c_out, taps = spec.param("c_out"), kh_ * kw_
    d_in, d_off, (_, sdc, _, _) = spec.param("grad_out")
    x_in, x_off, (_, sxc, _, _) = spec.param("x")
    grads = grad_outputs(spec)
    i64 = ".to(tl.int64)" if wide(spec) else ""
    ci = "co" if mult == 1 else f"(co // {mult})"
    weight, bias = 1 in grads, 2 in grads
    accs = [f"acc_{t}" for t in range(taps)] if weight else []
    body = [
        "pid_c = tl.program_id(0)",
        "pid_k = tl.program_id(1)",
        "rk = tl.arange(0, WG_BLOCK_M)[:, None]",
        f"co = (pid_c * WG_BLOCK_N + tl.arange(0, WG_BLOCK_N)[None, :]){i64}",
        f"col_mask = co < {c_out}",
        f"dy_cols = in{d_in} + {d_off} + co * {sdc}",
        f"x_cols = in{x_in} + {x_off} + {ci} * {sxc}",
        *[f"{a} = tl.zeros((WG_BLOCK_M, WG_BLOCK_N), dtype=tl.float32)" for a in accs],
        *(["db = tl.zeros((WG_BLOCK_M, WG_BLOCK_N), dtype=tl.float32)"] if bias else []),
    ]
    if int(spec.knob("WG_ROWS")):
        body += _wgrad_rows_loop(spec, weight, bias)
    else:
        body += _wgrad_flat_loop(spec, weight, bias)
    return _wgrad_stores(spec, body, accs, grads, ins, outs)


def _wgrad_flat_loop(spec: KernelSpec, weight: bool, bias: bool) -> list[str]:
    """WG_BLOCK_M output pixels a step: the output gradient's tile once, the input's at each
    tap (from L1)."""
    (n, _, _, _), (oh, ow), _, (sh, sw), (ph, pw), _, _ = _geometry(spec)
    p = n * oh * ow
    d_in, d_off, (sdn, sdc, sdh, sdw) = spec.param("grad_out")
    x_in, x_off, (sxn, sxc, _, _) = spec.param("x")
    i64 = ".to(tl.int64)" if wide(spec) else ""
    return [
        f"# the {p} output pixels, WG_BLOCK_M a step, split over SPLIT_K programs",
        f"for kt in range(pid_k, tl.cdiv({p}, WG_BLOCK_M), SPLIT_K):",
        f"    q = (kt * WG_BLOCK_M + rk){i64}",
        f"    mask = (q < {p}) & col_mask",
        f"    n_q = q // {oh * ow}",
        f"    oh_q = (q % {oh * ow}) // {ow}",
        f"    ow_q = q % {ow}",
        f"    a = {load(f'dy_cols + n_q * {sdn} + oh_q * {sdh} + ow_q * {sdw}', 'mask')}"
        ".to(tl.float32)",
        *(["    db += a"] if bias else []),
        *(
            [
                f"    x_rows = x_cols + n_q * {sxn}",
                f"    ih0 = oh_q * {sh} - {ph}",
                f"    iw0 = ow_q * {sw} - {pw}",
                *_wgrad_taps(spec),
            ]
            if weight
            else []
        ),
    ]


def _wgrad_rows_loop(spec: KernelSpec, weight: bool, bias: bool) -> list[str]:
    """WG_ROWS output rows of WG_BLOCK_M columns of one image a step (stride 1, dilation 1,
    one output channel a group): the output gradient's rows held, each input row loaded once a
    kernel column and multiplied into every (row, tap) pair it meets."""
    (n, _, h, w), (oh, ow), (kh_, kw_), _, (ph, pw), _, _ = _geometry(spec)
    rows = int(spec.knob("WG_ROWS"))
    d_in, d_off, (sdn, sdc, sdh, sdw) = spec.param("grad_out")
    x_in, x_off, (sxn, sxc, sxh, sxw) = spec.param("x")
    i64 = ".to(tl.int64)" if wide(spec) else ""
    tiles_h = -(-oh // rows)
    lines = [
        f"tiles_w = tl.cdiv({ow}, WG_BLOCK_M)",
        f"# {n} images x {tiles_h} row tiles x tiles_w column tiles, split over SPLIT_K programs",
        f"for kt in range(pid_k, {n * tiles_h} * tiles_w, SPLIT_K):",
        f"    n_q = (kt // ({tiles_h} * tiles_w)){i64}",
        f"    oh0 = (kt // tiles_w) % {tiles_h} * {rows}",
        f"    ow_q = ((kt % tiles_w) * WG_BLOCK_M + rk){i64}",
        "    zr = ow_q * 0",
        f"    dy_img = dy_cols + n_q * {sdn}",
    ]
    for r in range(rows):
        dy = f"dy_img + (oh0 + {r} + zr) * {sdh} + ow_q * {sdw}"
        ok = f"(ow_q < {ow}) & (oh0 + {r} + zr < {oh}) & col_mask"
        lines.append(f"    a{r} = {load(dy, ok)}.to(tl.float32)")
        if bias:
            lines.append(f"    db += a{r}")
    if not weight:
        return lines
    lines.append(f"    x_img = x_cols + n_q * {sxn}")

    def column(kw: int) -> list[str]:
        return [f"    iw = ow_q + {kw - pw}", f"    iw_ok = (iw >= 0) & (iw < {w}) & col_mask"]

    def row(j: int) -> list[str]:
        return [
            f"    ih = oh0 + {j - ph} + zr",
            f"    xs = {load(f'x_img + ih * {sxh} + iw * {sxw}', f'iw_ok & (ih >= 0) & (ih < {h})')}"
            ".to(tl.float32)",
        ]

    return lines + row_sweep(
        rows, (kh_, kw_), column, row, lambda r, kh, kw: f"    acc_{kh * kw_ + kw} += a{r} * xs"
    )


def _wgrad_stores(
    spec: KernelSpec,
    body: list[str],
    accs: list[str],
    grads: dict,
    ins: list[str],
    outs: list[str],
) -> list[str]:
    """Each tap's accumulator summed over its pixels: stored, or its split's partial."""
    c_out, kw_ = spec.param("c_out"), spec.param("kernel")[1]
    taps = spec.param("kernel")[0] * kw_
    bias = 2 in grads
    split = int(spec.knob("SPLIT_K"))
    for t, a in enumerate(accs):
        value = f"tl.sum({a}, axis=0)[None, :]"
        if split > 1:
            body.append(
                f"tl.store(partial_w + pid_k * {c_out * taps} + co * {taps} + {t}, {value}, mask=col_mask)"
            )
        else:
            j, strides = grads[1]
            at = weight_offset(strides, "co", "0", str(t // kw_), str(t % kw_))
            body.append(f"tl.store(out{j} + {at}, {grad_value(spec, value, j)}, mask=col_mask)")
    if bias:
        value = "tl.sum(db, axis=0)[None, :]"
        if split > 1:
            body.append(f"tl.store(partial_b + pid_k * {c_out} + co, {value}, mask=col_mask)")
        else:
            j, (sb,) = grads[2]
            body.append(
                f"tl.store(out{j} + co * {sb}, {grad_value(spec, value, j)}, mask=col_mask)"
            )
    params = [*ins, *outs, "partial_w", "partial_b"]
    return [
        "@triton.jit",
        f"def wgrad({', '.join(params)}, WG_BLOCK_M: tl.constexpr, WG_BLOCK_N: tl.constexpr, "
        "SPLIT_K: tl.constexpr, INTERPRET: tl.constexpr):",
        *["    " + b for b in body],
    ]


def render_conv_depthwise_backward(
    spec: KernelSpec,
) -> tuple[str, list[str], list[tuple[str, str, str]]]:
    """(kernel sources, host scratch lines, launches) for render.render_launches."""
    (n, c_in, h, w), _, (kh, kw), *_ = _geometry(spec)
    c_out, taps = spec.param("c_out"), kh * kw
    ins, outs = io_names(spec)
    launch = f"num_warps={spec.knob('num_warps')}, num_stages={spec.knob('num_stages')}"
    kernels: list[str] = []
    launches = []
    scratch: list[str] = []
    if any(ref[0] != "A" or ref[1] == 0 for ref, *_ in spec.stores):
        kernels += [*_dgrad(spec, ins, outs), "", ""]
        bm, bn, rows = spec.knob("BLOCK_M"), spec.knob("BLOCK_N"), by_rows(spec)
        programs = rows_grid(n, (h, w), rows, int(bm)) if rows else -(-(n * h * w) // bm)
        grid = f"({programs}, triton.cdiv({c_in}, {bn}))"
        args = f"{', '.join([*ins, *outs])}, BLOCK_M={bm}, BLOCK_N={bn}, INTERPRET=INTERPRET"
        launches.append(("dgrad", grid, f"{args}, {launch}"))
    if spec.param("grads"):
        split = int(spec.knob("SPLIT_K"))
        size = (c_out * taps * split, c_out * split) if split > 1 else (1, 1)
        scratch += [
            f"    partial_w = torch.empty({size[0]}, dtype=torch.float32, device=device)",
            f"    partial_b = torch.empty({size[1]}, dtype=torch.float32, device=device)",
        ]
        kernels += [*_wgrad(spec, ins, outs), "", ""]
        wm, wn = spec.knob("WG_BLOCK_M"), spec.knob("WG_BLOCK_N")
        args = f"{', '.join([*ins, *outs])}, partial_w, partial_b"
        knobs = f"WG_BLOCK_M={wm}, WG_BLOCK_N={wn}, SPLIT_K={split}, INTERPRET=INTERPRET"
        grid = f"(triton.cdiv({c_out}, {wn}), {split})"
        launches.append(("wgrad", grid, f"{args}, {knobs}, {launch}"))
        if split > 1:
            source, combined = add_combine(spec, ins, outs, args, c_out * taps, split)
            kernels += source
            launches.append(combined)
    return "\n".join(kernels), scratch, launches
