"""The depthwise convolution templates' knob rules ("conv_depthwise", the direct forward, and
"conv_depthwise_backward", templates/conv_dw_bwd.py): legality, defaults and seed tiles.

Owns: `validate_depthwise`, `validate_depthwise_backward` (raise `IllegalSpec` naming the value,
the limit and what to change), `rows_apply` (where the input gradient can go by rows),
`depthwise_backward_default_knobs`, `depthwise_seeds`, `depthwise_backward_seeds`; the register limits.
Must not: import spec.py, knobs.py or conv_rules.py (conv_rules.py folds these in), render or
measure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .domain import next_pow2
from .errors import IllegalSpec

if TYPE_CHECKING:
    from .spec_view import KnobValue, SpecView

MAX_DIRECT_TILE = 16384  # a depthwise program's fp32 accumulator: 64 registers a thread at 8 warps
# A depthwise weight gradient's KH*KW accumulator tiles, float32 registers a thread at most
# (ConvNeXt's 7x7: 49 tiles of WG_BLOCK_M x WG_BLOCK_N elements spread over the warps)
MAX_TAP_REGISTERS = 128
DW_WGRAD_PROGRAMS = 528  # programs a depthwise weight gradient aims at: four an H100 SM


def _out_pixels(spec: SpecView) -> int:
    """N * OH * OW: the output pixels (the forward's rows, the weight gradient's reduction)."""
    oh, ow = spec.param("out_hw")
    return int(spec.param("x_shape")[0]) * oh * ow


def validate_depthwise(spec: SpecView, k: dict) -> None:
    """The direct forward's BLOCK_M output pixels x BLOCK_N channels, or by rows its ROWS
    output rows of BLOCK_M columns."""
    if k["ROWS"]:
        oh, ow = spec.param("out_hw")
        _validate_rows(spec, k, oh, ow, spec.param("c_out"), "the convolution")
        return
    _validate_direct_tile(k, _out_pixels(spec), spec.param("c_out"))


def _validate_direct_tile(k: dict, m: int, c_out: int) -> None:
    """A direct (depthwise) program's BLOCK_M pixels x BLOCK_N channels of m x c_out."""
    bm, bn, warps = k["BLOCK_M"], k["BLOCK_N"], k["num_warps"]
    if bm * bn > MAX_DIRECT_TILE:
        raise IllegalSpec(
            f"BLOCK_M={bm} x BLOCK_N={bn} = {bm * bn} accumulators per program; the limit is "
            f"{MAX_DIRECT_TILE}. Reduce BLOCK_M or BLOCK_N"
        )
    if bm * bn < 32 * warps and warps > 1:
        raise IllegalSpec(
            f"num_warps={warps} leaves threads idle on a {bm}x{bn} tile; use num_warps <= "
            f"{max(1, bm * bn // 32)}"
        )
    if bn > next_pow2(c_out) or bm > max(8, next_pow2(m)):
        raise IllegalSpec(
            f"BLOCK_M={bm}, BLOCK_N={bn} are wider than the {m} pixels x {c_out} channels; use "
            f"BLOCK_M <= {max(8, next_pow2(m))}, BLOCK_N <= {next_pow2(c_out)}"
        )


def validate_depthwise_backward(spec: SpecView, k: dict) -> None:
    """dgrad's tile as the forward's (over N*H*W pixels x C_in channels); wgrad's KH*KW
    accumulator tiles in registers, no wider than the problem, each split given pixels."""
    n, c_in, h, w = spec.param("x_shape")
    if k["ROWS"]:
        _validate_dgrad_rows(spec, k)
    else:
        _validate_direct_tile(k, n * h * w, c_in)
    if k["WG_ROWS"]:
        _validate_wgrad_rows(spec, k)
        return
    wm, wn, split, warps = k["WG_BLOCK_M"], k["WG_BLOCK_N"], k["SPLIT_K"], k["num_warps"]
    kh, kw = spec.param("kernel")
    pixels, c_out = _out_pixels(spec), spec.param("c_out")
    regs = kh * kw * wm * wn // (32 * warps)
    if regs > MAX_TAP_REGISTERS:
        raise IllegalSpec(
            f"{kh * kw} tap accumulators of WG_BLOCK_M={wm} x WG_BLOCK_N={wn} over {warps} "
            f"warps are {regs} registers a thread; the limit is {MAX_TAP_REGISTERS}. Use a "
            "smaller weight-gradient tile or more warps"
        )
    if wn > next_pow2(c_out) or wm > max(8, next_pow2(pixels)):
        raise IllegalSpec(
            f"WG_BLOCK_M={wm}, WG_BLOCK_N={wn} are wider than the {pixels} pixels x {c_out} "
            f"channels; use WG_BLOCK_M <= {max(8, next_pow2(pixels))}, WG_BLOCK_N <= "
            f"{next_pow2(c_out)}"
        )
    if split > 1 and pixels < split * wm:
        raise IllegalSpec(
            f"SPLIT_K={split} x WG_BLOCK_M={wm} exceeds the {pixels} output pixels the weight "
            "gradient reduces; use fewer splits"
        )


def _validate_wgrad_rows(spec: SpecView, k: dict) -> None:
    """KH*KW tap accumulators and WG_ROWS held output-gradient rows of WG_BLOCK_M x WG_BLOCK_N
    in registers, no wider than the output, each split given steps."""
    why = rows_apply(spec)
    if why:
        raise IllegalSpec(
            f"WG_ROWS={k['WG_ROWS']}: the weight gradient cannot go by rows: {why}; use WG_ROWS=0"
        )
    rows, wm, wn, split, warps = (
        k[x] for x in ("WG_ROWS", "WG_BLOCK_M", "WG_BLOCK_N", "SPLIT_K", "num_warps")
    )
    kh, kw = spec.param("kernel")
    oh, ow = spec.param("out_hw")
    n, c_out = spec.param("x_shape")[0], spec.param("c_out")
    regs = (kh * kw + rows) * wm * wn // (32 * warps)
    if regs > MAX_TAP_REGISTERS:
        raise IllegalSpec(
            f"{kh * kw} tap accumulators and WG_ROWS={rows} rows of WG_BLOCK_M={wm} x "
            f"WG_BLOCK_N={wn} over {warps} warps are {regs} registers a thread; the limit is "
            f"{MAX_TAP_REGISTERS}. Use a smaller weight-gradient tile, fewer rows or more warps"
        )
    _within((oh, ow, c_out), (rows, wm, wn), ("WG_ROWS", "WG_BLOCK_M", "WG_BLOCK_N"))
    steps = n * -(-oh // rows) * -(-ow // wm)
    if split > steps:
        raise IllegalSpec(
            f"SPLIT_K={split} exceeds the {steps} steps of WG_ROWS={rows} x WG_BLOCK_M={wm} the "
            "weight gradient reduces; use fewer splits"
        )


def rows_apply(spec: SpecView) -> str | None:
    """Why the depthwise input gradient cannot go by rows (ROWS > 0), or None: each loaded
    output-gradient row feeds input rows a fixed kernel row apart only at stride 1, dilation
    1, one output channel a group, on a 2-D image."""
    n, c_in, h, w = spec.param("x_shape")
    if len(spec.domain) != 4:
        return "a 1-D convolution has one row"
    if tuple(spec.param("stride")) != (1, 1) or tuple(spec.param("dilation")) != (1, 1):
        return "it needs stride 1 and dilation 1"
    if spec.param("c_out") != c_in:
        return "it needs one output channel a group"
    return None


def _validate_dgrad_rows(spec: SpecView, k: dict) -> None:
    """The input gradient by rows: over the input's rows and columns."""
    _, c_in, h, w = spec.param("x_shape")
    _validate_rows(spec, k, h, w, c_in, "the input gradient")


def _validate_rows(spec: SpecView, k: dict, h: int, w: int, channels: int, what: str) -> None:
    """ROWS accumulator tiles of BLOCK_M columns x BLOCK_N channels in registers, no wider
    than the `h` x `w` x `channels` the program's tiles cover."""
    why = rows_apply(spec)
    if why:
        raise IllegalSpec(f"ROWS={k['ROWS']}: {what} cannot go by rows: {why}; use ROWS=0")
    rows, bm, bn, warps = k["ROWS"], k["BLOCK_M"], k["BLOCK_N"], k["num_warps"]
    regs = rows * bm * bn // (32 * warps)
    if regs > MAX_TAP_REGISTERS:
        raise IllegalSpec(
            f"ROWS={rows} accumulators of BLOCK_M={bm} x BLOCK_N={bn} over {warps} warps are "
            f"{regs} registers a thread; the limit is {MAX_TAP_REGISTERS}. Use fewer rows, a "
            "smaller tile or more warps"
        )
    if bm * bn < 32 * warps and warps > 1:
        raise IllegalSpec(
            f"num_warps={warps} leaves threads idle on a {bm}x{bn} row tile; use num_warps <= "
            f"{max(1, bm * bn // 32)}"
        )
    _within((h, w, channels), (rows, bm, bn), ("ROWS", "BLOCK_M", "BLOCK_N"))


def _within(
    extent: tuple[int, int, int], tile: tuple[int, int, int], names: tuple[str, ...]
) -> None:
    """A by-rows tile (rows, columns, channels) no wider than the image rows x columns x
    channels it covers (rounded up to a power of two; 2 rows and 8 columns at least)."""
    h, w, channels = extent
    limits = (max(2, next_pow2(h)), max(8, next_pow2(w)), next_pow2(channels))
    if any(t > limit for t, limit in zip(tile, limits, strict=True)):
        given = ", ".join(f"{n}={t}" for n, t in zip(names, tile, strict=True))
        use = ", ".join(f"{n} <= {limit}" for n, limit in zip(names, limits, strict=True))
        raise IllegalSpec(
            f"{given} are wider than the {h} rows x {w} columns x {channels} channels; use {use}"
        )


def depthwise_backward_default_knobs(spec: SpecView) -> dict[str, KnobValue]:
    """dgrad as the forward's default tile, or by rows in channels-last where it applies (8
    rows of 8 columns x 32 channels on 2 warps: the prototype's best tile over ConvNeXt's four
    stages, 2.0-2.8x cuDNN's NHWC input gradient, H100, BENCHMARKS.md); wgrad with its KH*KW
    accumulator tiles at 64 registers a thread over the same warps (512 elements a tile at
    3x3 on 4 warps, 128 at 7x7), channels fastest in channels-last (16 a tile) and one channel
    a program otherwise, split over the pixels until about DW_WGRAD_PROGRAMS programs run,
    each with 4 steps at least."""
    n, c_in, h, w = spec.param("x_shape")
    kh, kw = spec.param("kernel")
    pixels, c_out = _out_pixels(spec), spec.param("c_out")
    channels_last = spec.param("x")[2][1] == 1
    rows = 0
    if channels_last and rows_apply(spec) is None:
        rows, bm, bn = min(8, max(2, next_pow2(h))), 8, min(32, next_pow2(c_in))
        warps = max(1, min(2, bm * bn // 32))
    else:
        bn = min(next_pow2(c_in), 32 if channels_last else 8)
        bm = min(max(8, next_pow2(n * h * w)), 64 if channels_last else 128)
        warps = max(1, min(4, bm * bn // 256))
    tile = min(1024, 1 << (64 * 32 * warps // (kh * kw)).bit_length() - 1)
    wn = min(next_pow2(c_out), 16 if channels_last else 1, tile)
    wm = max(8, min(tile // wn, next_pow2(pixels)))
    while kh * kw * wm * wn // (32 * warps) > MAX_TAP_REGISTERS and wm > 8:
        wm //= 2  # one warp's tile (a small image) still over the register budget
    split = _wgrad_split(-(-c_out // wn), -(-pixels // wm))
    return dict(
        ROWS=rows, BLOCK_M=bm, BLOCK_N=bn, WG_ROWS=0, WG_BLOCK_M=wm, WG_BLOCK_N=wn,
        SPLIT_K=split, num_warps=warps, num_stages=1,
    )  # fmt: skip


def _wgrad_split(tiles: int, steps: int) -> int:
    """SPLIT_K for a weight gradient of `tiles` channel tiles and `steps` pixel steps: doubled
    until about DW_WGRAD_PROGRAMS programs run, each with 4 steps at least."""
    split = 1
    while split < 256 and tiles * split < DW_WGRAD_PROGRAMS and steps >= 8 * split:
        split *= 2
    return split


def depthwise_seeds(spec: SpecView) -> list[dict[str, KnobValue]]:
    """The direct forward's flat tiles worth measuring beside the default, and by rows where
    that applies: the prototype's two best tiles and 8x8x64 on 4 warps (rows, columns,
    channels, warps)."""
    flat: list[dict[str, KnobValue]] = [
        dict(ROWS=0, BLOCK_M=bm, BLOCK_N=bn, num_warps=w)
        for bm, bn, w in ((128, 8, 4), (32, 32, 4), (64, 64, 8), (256, 4, 4), (16, 64, 4))
    ]
    if rows_apply(spec) is not None:
        return flat
    return flat + [
        dict(ROWS=r, BLOCK_M=bm, BLOCK_N=bn, num_warps=w)
        for r, bm, bn, w in ((8, 8, 32, 2), (8, 16, 32, 4), (8, 8, 64, 4))
    ]


def depthwise_backward_seeds(spec: SpecView) -> list[dict[str, KnobValue]]:
    """Flat tiles worth measuring beside the default, and by rows where that applies."""
    flat: list[dict[str, KnobValue]] = [
        dict(ROWS=0, BLOCK_M=bm, BLOCK_N=bn, WG_ROWS=0, WG_BLOCK_M=wm, WG_BLOCK_N=wn, num_warps=w)
        for bm, bn, wm, wn, w in ((128, 8, 128, 1, 4), (32, 32, 16, 8, 4), (256, 4, 64, 4, 4))
    ]
    if rows_apply(spec) is not None:
        return flat
    n, c_out = spec.param("x_shape")[0], spec.param("c_out")
    oh, ow = spec.param("out_hw")
    # the input gradient by rows: the prototype's two best tiles and 8x8x64 on 4 warps (rows,
    # columns, channels, warps); then the weight gradient by rows as well (not yet timed: the
    # search measures it)
    return flat + [
        dict(ROWS=r, BLOCK_M=bm, BLOCK_N=bn, num_warps=w)
        for r, bm, bn, w in ((8, 8, 32, 2), (8, 16, 32, 4), (8, 8, 64, 4))
    ] + [
        dict(ROWS=8, BLOCK_M=16, BLOCK_N=32, WG_ROWS=r, WG_BLOCK_M=wm, WG_BLOCK_N=wn,
             SPLIT_K=_wgrad_split(-(-c_out // wn), n * -(-oh // r) * -(-ow // wm)), num_warps=4)
        for r, wm, wn in ((4, 8, 32), (2, 16, 16), (4, 16, 8))
    ]  # fmt: skip
