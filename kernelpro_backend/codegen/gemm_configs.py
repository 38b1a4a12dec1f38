"""GEMM tile configurations: the default knobs per operand kind and problem size, and the
configurations Inductor's max-autotune tries on CUDA, so the search and the GPU sweep
(bench/gemm_sweep.py) can start from them.

Owns: the tables below (edit them to change defaults), `gemm_default_knobs(spec)`,
`inductor_candidates(spec)`, `split_k_config(spec, knobs)` and `seed_configs(spec)` (the few
of them a search measures first).
Must not: validate knobs (knobs.py does, through `KernelSpec.with_knobs`), render or measure.

Defaults follow Inductor's H100 choices (torch/_inductor/template_heuristics/triton.py,
`mm_configs` and `persistent_mm_configs`): a 128x256x64 tile with 8 warps for large 16-bit
GEMMs ("wins on Hopper-class matmul" there), 128x128x64 below that, a narrow M tile with a
deep K tile for skinny GEMMs (memory-bound: fewer, longer K steps). The largest tile that
still gives every SM a program (>= NUM_SMS tiles; the largest from 95% of them) is taken;
fewer tiles than SMs leave SMs idle.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .domain import NUM_SMS, next_pow2
from .errors import IllegalSpec
from .knobs import tma_problem

if TYPE_CHECKING:
    from .spec import KernelSpec, KnobValue

# The largest tile counts as filling the GPU from this share of the SMs on: at 2048^3 (bf16 and
# fp16) its 128 tiles on 132 SMs ran 10% faster than 128x128's 256 (BENCHMARKS.md, GEMM sweep).
LARGEST_TILE_FILL = 0.95
SKINNY_M = 64  # at most this many rows: one narrow M tile, memory-bound
# "pointer" (cp.async loads through pointer tensors) or "tma" (on-device TMA descriptors, taken
# only where the operands allow it). Default "pointer": TMA alone, one tile per program, lost to
# it on the H100 (0.174 vs 0.164 ms on bf16 8192x1024->4096 + GELU).
DEFAULT_LOADS = "pointer"
# Where the operands allow TMA and the tiles fill the GPU, tensor-core GEMMs (16-bit operands,
# tf32) start from a persistent program whose tile and K loops are one software pipeline, TMA
# loads and the epilogue on two column slices: on the H100 (BENCHMARKS.md, GEMM sweep,
# 2026-11-26) 1-7% faster than the pointer seed on every bf16/fp16 GEMM of 2048^3 and up and on
# the training shapes (98-100% of cuBLAS), and 4-7% on GEMMs with epilogues — all with the
# largest tile, the only one it is taken with: on 1024^3 its 64x64 tiles ran 0.0117 ms against
# the pointer seed's 0.0074 (BENCHMARKS.md, GEMM sweep, 2026-11-26 and 2026-11-25).
PIPELINED: dict[str, KnobValue] = dict(
    LOADS="tma", PERSISTENT=True, FLATTEN=True, EPILOGUE_SUBTILE=2
)
Tile = tuple[int, int, int, int, int]  # BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps

# Per operand kind, largest tile first; the default is the first that fills the GPU.
DEFAULT_TILES: dict[str, tuple[Tile, ...]] = {
    "16bit": ((128, 256, 64, 3, 8), (128, 128, 64, 4, 8), (64, 128, 64, 4, 4), (64, 64, 64, 4, 4)),
    "tf32": ((128, 256, 32, 3, 8), (128, 128, 32, 4, 8), (64, 128, 32, 4, 4), (64, 64, 32, 4, 4)),
    # fp32 ieee runs on FMA units, not tensor cores: smaller tiles, 32 fp32 wide K steps
    "ieee": ((128, 128, 32, 3, 8), (64, 128, 32, 3, 4), (64, 64, 32, 3, 4)),
}
# (BLOCK_N, BLOCK_K, num_stages, num_warps) for M <= SKINNY_M; BLOCK_M = next_pow2(M) >= 16
SKINNY_TILES: dict[str, tuple[int, int, int, int]] = {
    "16bit": (128, 128, 4, 4),
    "tf32": (128, 64, 4, 4),
    "ieee": (64, 64, 3, 4),
}

# Inductor's CUDA mm_configs then persistent_mm_configs (torch 2.13), as
# (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps); GROUP_M is 8 in all of them.
INDUCTOR_MM_CONFIGS: tuple[Tile, ...] = (
    (32, 32, 16, 1, 2), (32, 32, 128, 2, 4), (32, 64, 32, 5, 8), (64, 32, 32, 5, 8),
    (64, 32, 128, 5, 4), (64, 64, 16, 2, 4), (64, 64, 32, 2, 4), (64, 64, 64, 3, 8),
    (64, 64, 128, 5, 4), (64, 128, 32, 3, 4), (64, 128, 32, 4, 8), (64, 128, 64, 3, 4),
    (64, 128, 128, 4, 4), (128, 64, 32, 3, 4), (128, 64, 32, 4, 8), (128, 128, 32, 2, 8),
    (128, 128, 32, 3, 4), (128, 128, 64, 3, 4), (128, 128, 64, 5, 8), (128, 128, 128, 4, 8),
    (128, 256, 64, 4, 8),
    (128, 256, 64, 3, 8), (128, 128, 64, 3, 8), (128, 128, 128, 3, 8), (128, 128, 128, 3, 4),
    (128, 128, 64, 4, 8), (256, 128, 64, 4, 8), (128, 128, 64, 5, 4),
)  # fmt: skip


def operand_kind(spec: KernelSpec) -> str:
    """'16bit' (bf16/fp16 operands), 'tf32' (fp32 at tf32/tf32x3 precision) or 'ieee'."""
    if dict(spec.anchor).get("operand_dtype", "float32") != "float32":
        return "16bit"
    return "ieee" if spec.precision == "ieee" else "tf32"


def _knobs(tile: Tile, spec: KernelSpec) -> dict[str, KnobValue]:
    bm, bn, bk, stages, warps = tile
    # Inductor's rule: each warp computes at least a 16x16 tile
    warps = max(2, min(warps, bm * bn // 256))
    return dict(
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, SPLIT_K=1, PERSISTENT=False,
        LOADS="pointer", EPILOGUE_SUBTILE=1, FLATTEN=False, SM_PROGRAMS=1, num_warps=warps,
        num_stages=stages,
    )  # fmt: skip


def _fit(tile: Tile, spec: KernelSpec) -> Tile:
    """Clamp tile sizes to the problem like Inductor does: never more than next_pow2(size),
    never below 16. A row reduction in the epilogue needs the whole row: BLOCK_N >= N."""
    m, n, k = (int(spec.param(x)) for x in ("m", "n", "k"))
    bm, bn, bk, stages, warps = tile
    bm = max(16, min(bm, next_pow2(m)))
    bk = max(16, min(bk, next_pow2(k)))
    if spec.reduced:
        bn = max(16, next_pow2(n))
        bm = min(bm, max(16, 128 * 128 // bn))  # keep the fp32 accumulator in registers
    else:
        bn = max(16, min(bn, next_pow2(n)))
    return bm, bn, bk, stages, warps


def fitted_knobs(spec: KernelSpec, tile: Tile) -> dict[str, KnobValue]:
    """Full GEMM knobs for a (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps) tile, clamped
    to the problem's sizes; may still be illegal (check with `spec.with_knobs`)."""
    return _knobs(_fit(tile, spec), spec)


def _shrink_to_legal(knobs: dict[str, KnobValue], spec: KernelSpec) -> KernelSpec:
    """The spec with these knobs, dropping pipeline stages until shared memory fits."""
    while True:
        try:
            return spec.with_knobs(**knobs)
        except IllegalSpec:
            if int(knobs["num_stages"]) <= 1:
                raise
            knobs["num_stages"] = int(knobs["num_stages"]) - 1


def gemm_default_knobs(spec: KernelSpec) -> dict[str, KnobValue]:
    """Default knobs of a GEMM spec (the spec's own knobs may be empty)."""
    m, n = int(spec.param("m")), int(spec.param("n"))
    batch = int(spec.param("batch"))
    kind = operand_kind(spec)
    largest = False
    if m <= SKINNY_M and not spec.reduced:
        bn, bk, stages, warps = SKINNY_TILES[kind]
        tile = _fit((next_pow2(m), bn, bk, stages, warps), spec)
    else:
        fitted = [_fit(t, spec) for t in DEFAULT_TILES[kind]]
        filling = [
            t
            for i, t in enumerate(fitted)
            if math.ceil(m / t[0]) * math.ceil(n / t[1]) * batch
            >= NUM_SMS * (LARGEST_TILE_FILL if i == 0 else 1)
        ]
        tile = filling[0] if filling else fitted[-1]
        largest = tile == fitted[0]
    knobs = _knobs(tile, spec)
    if DEFAULT_LOADS == "tma" and tma_problem(spec) is None:
        knobs["LOADS"] = "tma"
    base = _with_any_knobs(spec)
    chosen = _shrink_to_legal(knobs, base)
    tiles = math.ceil(m / tile[0]) * math.ceil(n / tile[1]) * batch
    if kind != "ieee" and largest and tma_problem(spec) is None and tiles >= NUM_SMS:
        for extra in (PIPELINED, dict(PIPELINED, EPILOGUE_SUBTILE=1)):  # no slices: reductions
            try:
                return dict(chosen.with_knobs(**extra).knobs)
            except IllegalSpec:
                continue
    return dict(chosen.knobs)


def _with_any_knobs(spec: KernelSpec) -> KernelSpec:
    """`spec` with a full knob set, so that `with_knobs` can validate changes to it."""
    if spec.knobs:
        return spec
    import dataclasses

    small = _knobs((16, 16, 16, 1, 2), spec)
    if spec.reduced:
        small["BLOCK_N"] = max(16, next_pow2(int(spec.param("n"))))
        small["num_warps"] = 8
    return dataclasses.replace(spec, knobs=tuple(sorted(small.items())))


def inductor_candidates(spec: KernelSpec) -> list[dict[str, KnobValue]]:
    """Inductor's max-autotune configurations fitted to this GEMM (clamped to its sizes like
    Inductor does), legal ones only, without duplicates; the default knobs first."""
    base = _with_any_knobs(spec)
    seen: list[dict[str, KnobValue]] = [gemm_default_knobs(spec)]
    for tile in INDUCTOR_MM_CONFIGS:
        knobs = fitted_knobs(spec, tile)
        try:
            base.with_knobs(**knobs)
        except IllegalSpec:
            continue
        if knobs not in seen:
            seen.append(knobs)
    return seen


# Configurations of Inductor's list a GEMM search measures beside its seed (one per tile shape).
# On the H100 max-autotune's pick was one our search had not reached in 27-36 trials from the
# seed: 64x64x32 (2 stages, 4 warps) on KernelBench L1_9 (fp32 32768x32 @ 32x32768, 1.96 ms
# against the search's 2.26), 128x128x64 on L2_59 (BENCHMARKS.md, "Seeds from max-autotune").
SEED_CONFIGS = 6
# Tiles under this area are left out where the problem has 4 waves of them anyway: they only
# pay on small GEMMs (launch- or wave-bound).
SMALL_TILE = 64 * 64


# A split-K seed gives each split at least this many K steps: fewer, and the partials' extra
# trip through memory outweighs the programs it adds.
SPLIT_K_MIN_STEPS = 4


def split_k_config(spec: KernelSpec, knobs: dict[str, KnobValue]) -> dict[str, KnobValue] | None:
    """`knobs` with K split over enough programs to fill the GPU, where its tiles leave more
    than half the SMs idle and K is long (a weight gradient's token axis, a LoRA adapter's
    update): the fewest splits (2-16) that give every SM a program, each split
    SPLIT_K_MIN_STEPS K steps or more. None where the tiles fill the GPU or K is short."""
    programs = _programs(spec, knobs)
    steps = math.ceil(int(spec.param("k")) / int(knobs["BLOCK_K"]))
    if knobs["PERSISTENT"] or 2 * programs > NUM_SMS or steps < 2 * SPLIT_K_MIN_STEPS:
        return None
    split = 2
    while split < 16 and programs * split < NUM_SMS and steps >= 2 * split * SPLIT_K_MIN_STEPS:
        split *= 2
    return dict(knobs, SPLIT_K=split)


def _programs(spec: KernelSpec, knobs: dict[str, KnobValue]) -> int:
    """Programs of a one-tile-per-program grid: output tiles times batch."""
    m, n = int(spec.param("m")), int(spec.param("n"))
    tiles = math.ceil(m / int(knobs["BLOCK_M"])) * math.ceil(n / int(knobs["BLOCK_N"]))
    return tiles * int(spec.param("batch"))


def seed_configs(spec: KernelSpec, limit: int = SEED_CONFIGS) -> list[dict[str, KnobValue]]:
    """Up to `limit` configurations: the default with K split (`split_k_config`) where its
    tiles leave most SMs idle, then `inductor_candidates(spec)` other than the default: the
    first of each tile shape (BLOCK_M, BLOCK_N, BLOCK_K) in Inductor's order, largest tile area
    first, a shape that leaves SMs idle (as `gemm_default_knobs` counts) or is small where
    bigger ones fill the GPU left out, and none of the default's shape (its neighbours are the
    search's first moves)."""
    m, n = int(spec.param("m")), int(spec.param("n"))
    batch = int(spec.param("batch"))
    default, *rest = inductor_candidates(spec)
    split = split_k_config(spec, default)
    if split is not None:
        try:
            _with_any_knobs(spec).with_knobs(**split)
        except IllegalSpec:
            split = None

    def shape(k: dict[str, KnobValue]) -> tuple[int, int, int]:
        return int(k["BLOCK_M"]), int(k["BLOCK_N"]), int(k["BLOCK_K"])

    firsts: dict[tuple[int, int, int], dict[str, KnobValue]] = {}
    for k in rest:
        firsts.setdefault(shape(k), k)
    firsts.pop(shape(default), None)
    many = (m // 64 or 1) * (n // 64 or 1) * batch >= 4 * NUM_SMS
    kept = [
        k
        for k in firsts.values()
        if _programs(spec, k) >= NUM_SMS * LARGEST_TILE_FILL
        and not (many and int(k["BLOCK_M"]) * int(k["BLOCK_N"]) < SMALL_TILE)
    ]
    kept.sort(key=lambda k: -int(k["BLOCK_M"]) * int(k["BLOCK_N"]))  # stable: Inductor's order
    return ([split] if split is not None else []) + kept[: limit - (split is not None)]
