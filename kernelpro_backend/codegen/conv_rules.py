"""The convolution templates' knobs: their spaces, legality, defaults and seed configurations.

Owns: `CONV_SPACE` (the knob values of "conv", the implicit-GEMM forward, "conv_depthwise",
the direct per-channel forward, "conv_backward" and "conv_depthwise_backward"; knobs.py folds
them into its table), `validate_conv(spec,
knobs)` (shared memory, registers, tiles wider than the problem; raises `IllegalSpec` naming
the value, the limit and what to change), `conv_default_knobs(spec)` and `conv_seed_configs`
(tiles worth measuring beside the default before the search moves one knob at a time); the
depthwise templates' rules live in conv_dw_rules.py and are folded in here.
The problem is read from the spec's anchor (templates/conv.py says what each parameter is):
an implicit GEMM of M = N*OH*OW output pixels by N = C_out/groups channels per group, reducing
K = C_in/groups * KH * KW.
Must not: import spec.py or knobs.py (knobs.py calls this), render or measure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .attention_rules import SMEM_BYTES
from .conv_dw_rules import (
    depthwise_backward_default_knobs,
    depthwise_backward_seeds,
    depthwise_seeds,
    validate_depthwise,
    validate_depthwise_backward,
)
from .domain import next_pow2
from .errors import IllegalSpec

if TYPE_CHECKING:
    from .spec_view import KnobValue, SpecView

CONV_TEMPLATES = ("conv", "conv_depthwise", "conv_backward", "conv_depthwise_backward")
CONV_SPACE: dict[str, dict[str, tuple[KnobValue, ...]]] = {
    "conv": {
        "BLOCK_M": (16, 32, 64, 128, 256),  # output pixels (N*OH*OW) per program
        "BLOCK_N": (16, 32, 64, 128, 256),  # output channels of one group per program
        "BLOCK_K": (16, 32, 64, 128),  # input channels per step of each (kh, kw) tap
        "GROUP_M": (1, 4, 8, 16),
        # 1: the weight repacked (and tf32-rounded) by its own launch first, so B tiles are
        # contiguous along N (templates/conv_pack.py); 0: read through its strides
        "PACK_W": (0, 1),
        # 1: the input copied dense NHWC first (rounded to tf32 under tf32), so A tiles are
        # contiguous along the input channels (templates/conv_pack.py)
        "PACK_X": (0, 1),
        "num_warps": (2, 4, 8),
        "num_stages": (1, 2, 3, 4, 5),
    },
    "conv_depthwise": {
        "ROWS": (0, 2, 4, 8),  # > 0: ROWS output rows of BLOCK_M columns a program
        "BLOCK_M": (8, 16, 32, 64, 128, 256),  # output pixels per program
        "BLOCK_N": (1, 2, 4, 8, 16, 32, 64, 128),  # channels per program
        "num_warps": (1, 2, 4, 8),
        "num_stages": (1, 2),
    },
    # templates/conv_bwd.py: the input gradient (BLOCK_*: input pixels, input channels of a
    # group, output channels a step) and the weight gradient (WG_BLOCK_*: output channels,
    # (input channel, kh, kw) columns, output pixels a step, SPLIT_K programs sharing them)
    "conv_backward": {
        "BLOCK_M": (16, 32, 64, 128, 256),
        "BLOCK_N": (16, 32, 64, 128, 256),
        "BLOCK_K": (16, 32, 64, 128),
        "GROUP_M": (1, 4, 8, 16),
        "PACK_W": (0, 1),  # the input gradient's weight repacked first (conv_pack.py)
        # 1: the weight gradient's input copied dense NCHW first, rounded to tf32 under tf32
        # (conv_pack.pack_input), so its main loop does not round B; needs a weight gradient
        "PACK_X": (0, 1),
        "WG_BLOCK_M": (16, 32, 64, 128, 256),
        "WG_BLOCK_N": (16, 32, 64, 128, 256),
        "WG_BLOCK_K": (16, 32, 64, 128),
        "SPLIT_K": (1, 2, 4, 8, 16, 32, 64, 128),
        "num_warps": (2, 4, 8),
        "num_stages": (1, 2, 3, 4, 5),
    },
    # templates/conv_dw_bwd.py: the input gradient's tile (BLOCK_*: input pixels, channels;
    # with ROWS > 0, ROWS input rows of BLOCK_M columns each, every loaded output-gradient row
    # feeding all the rows it reaches) and the weight gradient's (WG_BLOCK_*: output pixels a
    # step, channels; SPLIT_K programs sharing the pixels)
    "conv_depthwise_backward": {
        "ROWS": (0, 2, 4, 8),
        "BLOCK_M": (8, 16, 32, 64, 128, 256),
        "BLOCK_N": (1, 2, 4, 8, 16, 32, 64, 128),
        "WG_ROWS": (0, 2, 4, 8),  # > 0: the weight gradient a few output rows a step
        "WG_BLOCK_M": (8, 16, 32, 64, 128, 256, 512),
        "WG_BLOCK_N": (1, 2, 4, 8, 16, 32, 64),
        "SPLIT_K": (1, 2, 4, 8, 16, 32, 64, 128, 256),
        "num_warps": (1, 2, 4, 8),
        "num_stages": (1, 2),
    },
}
# Programs a split weight gradient aims at: two an SM of an H100 (132 SMs).
WGRAD_PROGRAMS = 264
WGRAD_PARTIAL_BYTES = 64 * 2**20  # float32 partials of a split weight gradient, at most


def gemm_sizes(spec: SpecView) -> tuple[int, int, int]:
    """(M, N, K) of the implicit GEMM one group of the convolution is."""
    n, c_in, _, _ = spec.param("x_shape")
    kh, kw = spec.param("kernel")
    oh, ow = spec.param("out_hw")
    groups = spec.param("groups")
    return n * oh * ow, spec.param("c_out") // groups, c_in // groups * kh * kw


def _elt_bytes(spec: SpecView) -> int:
    return 4 if spec.param("operand_dtype") == "float32" else 2


def backward_sizes(spec: SpecView) -> dict[str, int]:
    """The two GEMMs of a conv backward: dgrad's rows (N*H*W), columns (C_in/groups) and
    channel steps (C_out/groups), wgrad's rows (C_out/groups), columns (C_in/groups*KH*KW; one
    tap's: `wc`, C_in/groups) and reduction (N*OH*OW)."""
    n, c_in, h, w = spec.param("x_shape")
    kh, kw = spec.param("kernel")
    oh, ow = spec.param("out_hw")
    groups = spec.param("groups")
    cig, cog = c_in // groups, spec.param("c_out") // groups
    return dict(dm=n * h * w, dn=cig, dk=cog, wm=cog, wn=cig * kh * kw, wc=cig, wk=n * oh * ow)


def validate_conv(spec: SpecView, k: dict) -> None:
    if spec.template == "conv_depthwise":
        validate_depthwise(spec, k)
        return
    if spec.template == "conv_depthwise_backward":
        validate_depthwise_backward(spec, k)
        return
    if spec.template == "conv_backward":
        s = backward_sizes(spec)
        _validate_tile(spec, k, "", (s["dm"], s["dn"], s["dk"]))
        wg = {**k, **{x: k[f"WG_{x}"] for x in ("BLOCK_M", "BLOCK_N", "BLOCK_K")}}
        _validate_tile(spec, wg, "WG_", (s["wm"], s["wc"], s["wk"]))  # columns: one tap's
        _validate_split(spec, k, s)
        _validate_pack_x(spec, k)
        return
    m, n, _ = gemm_sizes(spec)
    _validate_tile(spec, k, "", (m, n, spec.param("x_shape")[1] // spec.param("groups")))


def _tf32(spec: SpecView) -> bool:
    """float32 operands under the tf32 policy: the loops round them (templates/conv_pack.py)."""
    return spec.precision == "tf32" and spec.param("operand_dtype") == "float32"


def _validate_pack_x(spec: SpecView, k: dict) -> None:
    if k["PACK_X"] and not spec.param("grads"):
        raise IllegalSpec(
            "PACK_X=1 copies the weight gradient's input, and this backward computes no "
            "weight gradient; use PACK_X=0"
        )


def _validate_split(spec: SpecView, k: dict, s: dict[str, int]) -> None:
    split = k["SPLIT_K"]
    if split > 1 and s["wk"] < split * k["WG_BLOCK_K"]:
        raise IllegalSpec(
            f"SPLIT_K={split} x WG_BLOCK_K={k['WG_BLOCK_K']} exceeds the {s['wk']} output pixels "
            "the weight gradient reduces; use fewer splits"
        )
    partial = split * spec.param("c_out") * s["wn"] * 4
    if split > 1 and partial > WGRAD_PARTIAL_BYTES:
        raise IllegalSpec(
            f"SPLIT_K={split} stores {partial / 2**20:.0f} MiB of float32 partials (the limit is "
            f"{WGRAD_PARTIAL_BYTES // 2**20} MiB); use fewer splits"
        )


def _validate_tile(spec: SpecView, k: dict, prefix: str, sizes: tuple[int, int, int]) -> None:
    """One implicit GEMM's tile: shared memory, registers, and no block wider than its axis
    (`sizes`: rows, columns, the reduction's step axis)."""
    bm, bn, bk, stages = k["BLOCK_M"], k["BLOCK_N"], k["BLOCK_K"], k["num_stages"]
    m, n, c_in_group = sizes
    smem = (bm * bk + bk * bn) * _elt_bytes(spec) * stages
    if smem > SMEM_BYTES:
        raise IllegalSpec(
            f"{prefix}BLOCK_M={bm}, {prefix}BLOCK_N={bn}, {prefix}BLOCK_K={bk}, num_stages={stages} "
            f"need {smem} bytes of "
            f"shared memory; the limit is {SMEM_BYTES}. Reducing block sizes or num_stages may help"
        )
    regs = bm * bn // (32 * k["num_warps"])
    if regs > 256:
        raise IllegalSpec(
            f"a {bm}x{bn} fp32 accumulator over {k['num_warps']} warps is {regs} registers per "
            "thread; the limit is 255. Use more warps or a smaller tile"
        )
    for name, block, size in (("BLOCK_N", bn, n), ("BLOCK_K", bk, c_in_group), ("BLOCK_M", bm, m)):
        if block > max(16, next_pow2(size)):
            raise IllegalSpec(
                f"{prefix}{name}={block} is wider than the {size} it tiles; use <= "
                f"{max(16, next_pow2(size))}"
            )


def conv_default_knobs(spec: SpecView) -> dict[str, KnobValue]:
    """The implicit GEMM: 128 x 128 tiles on 8 warps where the problem fills them (a Hopper
    GEMM's tile: two warpgroups of 64 rows), 32 input channels a step (64 in 16-bit), 3 stages,
    the weight repacked where its B tiles would be gathers or need tf32 rounding; depthwise: 64
    pixels x 32 channels, with channels fastest where they are contiguous (channels-last) and
    pixels otherwise."""
    if spec.template == "conv_backward":
        return _backward_default_knobs(spec)
    if spec.template == "conv_depthwise_backward":
        return depthwise_backward_default_knobs(spec)
    m, n, _ = gemm_sizes(spec)
    c_in_group = spec.param("x_shape")[1] // spec.param("groups")
    if spec.template == "conv_depthwise":
        c_out = spec.param("c_out")
        channels_last = spec.param("x")[2][1] == 1
        bn = min(next_pow2(c_out), 32 if channels_last else 8)
        bm = min(max(8, next_pow2(m)), 128 if not channels_last else 64)
        warps = max(1, min(4, bm * bn // 256))
        return dict(ROWS=0, BLOCK_M=bm, BLOCK_N=bn, num_warps=warps, num_stages=1)
    bm, bn, bk, warps = _gemm_tile(spec, m, n, c_in_group)
    return dict(
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, PACK_W=_pack_default(spec), PACK_X=0,
        num_warps=warps, num_stages=3,
    )  # fmt: skip


def _pack_default(spec: SpecView) -> int:
    """Repack the weight where the main loop's B tile is not contiguous along N (its input
    channel stride is not 1: OIHW weights; the forward's and dgrad's B alike) or where the
    repack saves the loop rounding B to tf32."""
    return int(_tf32(spec) or spec.param("weight")[2][1] != 1)


def _gemm_tile(spec: SpecView, m: int, n: int, k_step: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps) of an implicit GEMM of m x n, k_step channels."""
    low = _elt_bytes(spec) == 2
    bn = min(128, max(16, next_pow2(n)))
    bm = min(128 if m >= 4096 else 64, max(16, next_pow2(m)))
    bk = min(64 if low else 32, max(16, next_pow2(k_step)))
    return bm, bn, bk, 8 if bm * bn >= 128 * 128 else 4


def _backward_default_knobs(spec: SpecView) -> dict[str, KnobValue]:
    """dgrad as the forward's tile; wgrad 128 x 128 (fewer where the channels are fewer) at one
    tap a program, split over the output pixels until about WGRAD_PROGRAMS programs run (a
    weight gradient has few tiles and a long reduction: ResNet-50's 3x3 256 -> 256 one is
    2 x 9 x 2 tiles of 128 x 128, reducing over N*14*14 pixels)."""
    s = backward_sizes(spec)
    bm, bn, bk, warps = _gemm_tile(spec, s["dm"], s["dn"], s["dk"])
    wm, wn = (min(128, max(16, next_pow2(s[a]))) for a in ("wm", "wc"))
    wk = 64 if _elt_bytes(spec) == 2 else 32
    taps = s["wn"] // s["wc"]
    tiles = -(-s["wm"] // wm) * taps * -(-s["wc"] // wn) * spec.param("groups")
    split = 1
    while split < 128 and tiles * split < WGRAD_PROGRAMS and s["wk"] >= 8 * split * wk:
        split *= 2
    while split > 1 and split * spec.param("c_out") * s["wn"] * 4 > WGRAD_PARTIAL_BYTES:
        split //= 2
    warps = max(warps, 8 if wm * wn >= 128 * 128 else 4)
    return dict(
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, PACK_W=_pack_default(spec),
        PACK_X=int(_tf32(spec) and bool(spec.param("grads"))),
        WG_BLOCK_M=wm, WG_BLOCK_N=wn, WG_BLOCK_K=wk, SPLIT_K=split, num_warps=warps,
        num_stages=3,
    )  # fmt: skip


# Implicit-GEMM tiles measured beside the default (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages):
# Hopper GEMM tiles (Inductor's conv configurations and Triton's H100 matmul ones), the wide
# ones first; illegal ones (shared memory, wider than the channels) are left out per problem.
_SEED_TILES = (
    (128, 128, 32, 8, 3),
    (128, 128, 64, 8, 3),
    (128, 64, 32, 4, 4),
    (64, 128, 32, 4, 4),
    (128, 256, 64, 8, 3),
    (256, 128, 64, 8, 3),
    (64, 64, 32, 4, 3),
    (256, 64, 32, 8, 3),
)


# float32's first seed: the tf32 GEMM form's measured tile (templates/tf32.py TILE: 0.85-0.90x
# of cuBLAS TF32); the wide seeds above take BLOCK_K 64, more shared memory than 3 float32
# stages of 128 x 256 have (295 KiB), so without it float32 never tries a 128 x 256 tile.
_F32_SEED_TILES = ((128, 256, 32, 8, 3),)


def conv_seed_configs(spec: SpecView) -> list[dict[str, KnobValue]]:
    wide = _F32_SEED_TILES if _elt_bytes(spec) == 4 else ()
    if spec.template == "conv_backward":
        return [dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=w, num_stages=st)
                for bm, bn, bk, w, st in (*wide, *_SEED_TILES[:4])]  # fmt: skip
    if spec.template == "conv_depthwise_backward":
        return depthwise_backward_seeds(spec)
    if spec.template == "conv_depthwise":
        return depthwise_seeds(spec)
    return [
        dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=w, num_stages=s)
        for bm, bn, bk, w, s in (*wide, *_SEED_TILES)
    ]
