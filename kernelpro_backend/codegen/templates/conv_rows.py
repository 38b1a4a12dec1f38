"""The depthwise templates by rows (knob ROWS / WG_ROWS; codegen/conv_dw_rules.py says where
they apply: stride 1, dilation 1, one output channel a group, 2-D): a program owns a few rows of
one image, and each source row it needs is loaded once a kernel column for every row it feeds,
not once a tap.

Owns: `row_sweep` (the unrolled loop nest every by-rows loop is), `rows_body` (a forward or
input-gradient program up to its accumulators), `rows_program` (a by-rows program's
coordinates, masks and accumulators), `rows_main_loop`
(the forward's and the input gradient's loop: the input gradient is the forward of the output
gradient by the flipped kernel), `rows_stores` (the subgraph's tail once a row) and
`rows_grid`, `direct_rows` (the "conv_depthwise" forward by rows; templates/conv_dw_bwd.py builds its input
gradient from the same parts).
Must not: lower aten or launch anything.
"""

from __future__ import annotations

from collections.abc import Callable

from ..emitter import Emitter
from ..spec import KernelSpec
from .conv_parts import load, wide


def rows_main_loop(
    rows: int,
    kernel: tuple[int, int],
    padding: tuple[int, int],
    names: tuple[str, str, str],
    strides: tuple[int, int],
    extent: tuple[int, int],
    w_strides: tuple[int, int],
    flip: bool = False,
) -> list[str]:
    """The by-rows main loop of the depthwise templates: for each kernel column its KH weights
    (from `w_cols`), then each source row the program's `rows` rows need, loaded once and added
    into the accumulator (`acc0`...) of every row it feeds. `names`: the source image's pointer,
    the program's first row and its columns ([BLOCK_M, 1]) as variables; `strides`, `extent`,
    `padding`: the source's row and column strides, its rows and columns, its padding. `flip`:
    the kernel turned half a turn (an input gradient is the forward of the output gradient by
    the flipped kernel at padding K - 1 - P). Needs `col_mask` and `zr` (a zero [BLOCK_M, 1])."""
    (kh_, kw_), (ph, pw), (src, first, cols), (sh, sw), (h, w) = (
        kernel,
        padding,
        names,
        strides,
        extent,
    )

    def column(kw: int) -> list[str]:
        tap_w = kw_ - 1 - kw if flip else kw
        return [
            *[
                f"w{kh} = {load(f'w_cols + {kh_ - 1 - kh if flip else kh} * {w_strides[0]} + {tap_w} * {w_strides[1]}', 'col_mask')}"
                ".to(tl.float32)"
                for kh in range(kh_)
            ],
            f"ic = {cols} + {kw - pw}",
            f"ic_ok = (ic >= 0) & (ic < {w}) & col_mask",
        ]

    def row(j: int) -> list[str]:
        return [
            f"ir = {first} + {j - ph} + zr",
            f"a = {load(f'{src} + ir * {sh} + ic * {sw}', f'ic_ok & (ir >= 0) & (ir < {h})')}"
            ".to(tl.float32)",
        ]

    return row_sweep(rows, kernel, column, row, lambda r, kh, kw: f"acc{r} += a * w{kh}")


def row_sweep(
    rows: int,
    kernel: tuple[int, int],
    column: Callable[[int], list[str]],
    row: Callable[[int], list[str]],
    fma: Callable[[int, int, int], str],
) -> list[str]:
    """The by-rows loop nest, unrolled: for each kernel column `kw` its set-up (`column(kw)`),
    then each of the ROWS + KH - 1 source rows `j` the program's rows reach, loaded once
    (`row(j)`) and added by `fma(r, kh, kw)` into each program row `r` it feeds through kernel
    row `kh` (r = j - kh)."""
    kh_, kw_ = kernel
    lines = []
    for kw in range(kw_):
        lines += column(kw)
        for j in range(rows + kh_ - 1):
            lines += row(j)
            lines += [fma(j - kh, kh, kw) for kh in range(kh_) if 0 <= j - kh < rows]
    return lines


def rows_program(
    rows: int, extent: tuple[int, int], names: tuple[str, str, str], channels: int, i64: str
) -> list[str]:
    """A by-rows program's coordinates over an `extent` (rows, columns) image: its image `n0`,
    first row and columns ([BLOCK_M, 1]) and channels ([1, BLOCK_N], `col_mask`), named by
    `names`; `zr` (a zero [BLOCK_M, 1]: a row's scalar as a block, for masks) and the ROWS
    float32 accumulators `acc0`..."""
    (h, w), (first, cols, chans) = extent, names
    tiles_h = -(-h // rows)
    return [
        "pid_m = tl.program_id(0)",
        "pid_n = tl.program_id(1)",
        f"tiles_w = tl.cdiv({w}, BLOCK_M)",
        f"n0 = (pid_m // ({tiles_h} * tiles_w)){i64}",
        f"{first} = (pid_m // tiles_w) % {tiles_h} * {rows}",
        f"{cols} = ((pid_m % tiles_w) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]){i64}",
        f"{chans} = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]){i64}",
        f"col_mask = {chans} < {channels}",
        f"zr = {cols} * 0",
        *[f"acc{r} = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)" for r in range(rows)],
    ]


def rows_stores(
    em: Emitter, rows: int, extent: tuple[int, int], names: tuple[str, str, str]
) -> list[str]:
    """The emitter's tail and stores once a row, on that row's accumulator: the row's
    coordinates (`n_i`, the row coordinate named third in `names`, `rm`, the masks) bound
    first. The caller has asked `em` for its stores."""
    (h, w), (first, cols, row) = extent, names
    lines = []
    for r in range(rows):
        lines += [
            f"# row {first} + {r}",
            "n_i = n0 + zr",
            f"{row} = {first} + {r} + zr",
            f"rm = (n_i * {h} + {row}) * {w} + {cols}",
            f"row_mask = ({cols} < {w}) & ({row} < {h})",
            "mask = row_mask & col_mask",
            f"acc = acc{r}",
            *[line.removeprefix("    ") for line in em.lines],
        ]
    return lines


def direct_rows(spec: KernelSpec, em: Emitter, head: list[str]) -> tuple[str, int]:
    """Depthwise by rows (knob ROWS > 0; conv_dw_rules.rows_apply: stride 1, dilation 1, one
    output channel a group, 2-D): a program owns ROWS output rows x BLOCK_M columns of one
    image by BLOCK_N channels, one accumulator a row; each input row is loaded once a kernel
    column and added into every output row it feeds (KW * (ROWS + KH - 1) / ROWS loads an
    output pixel instead of KH * KW; on ConvNeXt's channels-last 7x7 a prototype ran
    1.07-1.43x cuDNN, H100, BENCHMARKS.md). The epilogue runs on each row's accumulator.
    Returns the kernel's source and its programs along the grid's first axis."""
    oh, ow = spec.param("out_hw")
    rows = int(spec.knob("ROWS"))
    body = rows_body(spec, rows, ("oh0", "ow_i", "co"), "x_img")
    em.local_memo[("A", 0)] = "acc"
    for j in range(len(spec.stores)):
        em.store(j, f"out{j}")
    body += rows_stores(em, rows, (oh, ow), ("oh0", "ow_i", "oh_i"))
    source = "\n".join(em.helper_source() + head + ["    " + b for b in body])
    return source, rows_grid(spec.param("x_shape")[0], (oh, ow), rows, int(spec.knob("BLOCK_M")))


def rows_body(
    spec: KernelSpec, rows: int, names: tuple[str, str, str], image: str, flip: bool = False
) -> list[str]:
    """A by-rows program up to its accumulators: its coordinates (`names`: first row, columns,
    channels; rows_program), the image it reads as `image` and the weight's columns
    (`w_cols`), and the main loop. The forward reads the input x over the output's rows; with
    `flip`, the input gradient reads the output gradient over the input's rows (the forward of
    the output gradient by the flipped kernel at padding K - 1 - P)."""
    _, c_in, h, w = spec.param("x_shape")
    oh, ow = spec.param("out_hw")
    (kh_, kw_), (ph, pw) = spec.param("kernel"), spec.param("padding")
    if flip:
        extent, channels, source = (h, w), c_in, "grad_out"
        source_extent, padding = (oh, ow), (kh_ - 1 - ph, kw_ - 1 - pw)
    else:
        extent, channels, source = (oh, ow), spec.param("c_out"), "x"
        source_extent, padding = (h, w), (ph, pw)
    first, cols, chans = names
    s_in, s_off, (ssn, ssc, ssh, ssw) = spec.param(source)
    w_in, w_off, (swo, _, swh, sww) = spec.param("weight")
    i64 = ".to(tl.int64)" if wide(spec) else ""
    return [
        *rows_program(rows, extent, names, channels, i64),
        f"{image} = in{s_in} + {s_off} + n0 * {ssn} + {chans} * {ssc}",
        f"w_cols = in{w_in} + {w_off} + {chans} * {swo}",
        *rows_main_loop(
            rows, (kh_, kw_), padding, (image, first, cols), (ssh, ssw), source_extent,
            (swh, sww), flip,
        ),
    ]  # fmt: skip


def rows_grid(n: int, extent: tuple[int, int], rows: int, block_m: int) -> int:
    """A by-rows kernel's programs along the grid's first axis: every image's row tiles by
    column tiles of an `extent` (rows, columns) image."""
    return n * -(-extent[0] // rows) * -(-extent[1] // block_m)
