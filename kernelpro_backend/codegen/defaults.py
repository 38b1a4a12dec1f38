"""Default knobs: the values a freshly lowered spec starts from, before any search.

Owns: `default_knobs(spec)`: GEMMs from gemm_configs.py's tables, convolutions from
conv_rules.py, attention forward and backward and the row templates (pointwise, row_reduction)
by the rules below.
Must not: define which values are legal (knobs.py does, and every default here passes its
`validate`), render or measure.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import TYPE_CHECKING

from .attention_rules import validate_attention_backward
from .conv_rules import CONV_TEMPLATES, conv_default_knobs, conv_seed_configs
from .domain import extent, rows_cols
from .errors import IllegalSpec, Unsupported
from .gemm_configs import gemm_default_knobs  # the GEMM tables to edit live there
from .gemm_configs import seed_configs as gemm_seed_configs
from .knobs import next_pow2

log = logging.getLogger("kernelpro.codegen")

if TYPE_CHECKING:
    from .spec import KernelSpec, KnobValue


def default_knobs(spec: KernelSpec) -> tuple[tuple[str, KnobValue], ...]:
    knobs: dict[str, KnobValue]
    if spec.template == "gemm":
        knobs = gemm_default_knobs(spec)
    elif spec.template == "attention":
        d = next_pow2(spec.param("head_dim"))
        knobs = _fit_sequences(
            spec,
            dict(BLOCK_M=128 if d <= 64 else 64, BLOCK_N=64, num_warps=4 if d <= 64 else 8, num_stages=2),
        )  # fmt: skip
    elif spec.template == "attention_backward":
        return _default_attention_backward(spec)
    elif spec.template in CONV_TEMPLATES:
        knobs = conv_default_knobs(spec)
    elif spec.template in (
        "row_cluster",
        "row_split",
        "gemm_library",
        "gemm_padded",
        "gemm_cutlass",
        "conv_cutlass",
    ):
        raise IllegalSpec(f"a {spec.template} spec comes from alternatives(seed), with its knobs")
    else:
        rows, cols = rows_cols(spec)
        n_cols, n_rows = extent(spec, cols), extent(spec, rows)
        block_c = next_pow2(n_cols)
        if block_c > 16384:
            block_c = LOOP_BLOCK_C  # longer rows loop: 32000-wide CE rows take 8 steps of 4096
        if spec.template == "row_reduction" and rows and rows[-1] == len(spec.domain) - 1:
            # strided columns (a mean over a middle dim): consecutive rows are consecutive
            # addresses, so the tile is many rows by a few columns, read along the rows
            block_c = min(block_c, STRIDED_BLOCK_C)
        target = 2048 if spec.template == "row_reduction" else 4096
        r = max(1, min(next_pow2(n_rows), target // block_c, 256))
        warps = min(16, max(1, r * block_c // 512))
        knobs = dict(ROWS=r, BLOCK_C=block_c, num_warps=warps, num_stages=1, SM_SHARE=0)
        if spec.template == "row_reduction":
            knobs["ONLINE"] = "lane"
            knobs["VARIANCE"] = "passes"
        if block_c == LOOP_BLOCK_C and block_c < n_cols:
            knobs = _reread_knobs(spec, knobs)
    return tuple(sorted(knobs.items()))


def _reread_knobs(spec: KernelSpec, knobs: dict[str, KnobValue]) -> dict[str, KnobValue]:
    """Looped rows that a later loop reads again: REREAD_WARPS warps, one 16-byte access a
    thread a step (4096 float32 or 8192 bf16/fp16 columns)."""
    from .cluster_rules import FLOATS
    from .templates.rowwise import rereads_rows

    try:
        reread = rereads_rows(dataclasses.replace(spec, knobs=tuple(sorted(knobs.items()))))
    except (IllegalSpec, Unsupported) as e:  # the render says so again, where it is used
        log.debug("no re-read rule for %s: %s", spec.pattern, e)
        return knobs
    if not reread:
        return knobs
    widest = max(spec.inputs, key=lambda i: math.prod(i[0]))[2]
    block = REREAD_WARPS * 32 * 16 // FLOATS.get(widest, 4)
    return {**knobs, "BLOCK_C": block, "num_warps": REREAD_WARPS}


def _fit_sequences(spec: KernelSpec, knobs: dict[str, KnobValue]) -> dict[str, KnobValue]:
    """Query and key blocks no longer than their sequences (a power of two, at least 16): Swin's
    49-token windows fill one 64-row block, not a third of a 128-row one."""
    longest = {
        "BLOCK_M": spec.param("seq_q"), "BLOCK_M_DQ": spec.param("seq_q"),
        "BLOCK_N": spec.param("seq_k"), "BLOCK_N_DQ": spec.param("seq_k"),
    }  # fmt: skip
    for name, seq in longest.items():
        if name in knobs:
            knobs[name] = min(int(knobs[name]), max(16, next_pow2(seq)))
    return knobs


def _default_attention_backward(spec: KernelSpec) -> tuple[tuple[str, KnobValue], ...]:
    """Flash-attention-2 style: large key blocks per dK/dV program stepping over small query
    blocks, large query blocks per dQ program stepping over small key blocks (Triton's fused
    attention tutorial: 32/128 and 128/32 with 4 warps). Head dim 128 uses 64x64 blocks in both
    kernels, 4 warps, 2 stages: on the H100 (B4 H16 S2048 bf16) that took 0.93 / 0.56 ms
    (full / causal) against 1.70 / 1.12 ms with 8 warps and 1.32 / 0.85 ms for PyTorch's flash
    backward (BENCHMARKS.md, attention backward)."""
    wide = next_pow2(max(spec.param("head_dim"), spec.param("value_dim"))) > 64
    knobs: dict[str, KnobValue] = (
        dict(BLOCK_M=64, BLOCK_N=64, BLOCK_M_DQ=64, BLOCK_N_DQ=64, DQ="kernel", num_warps=4, num_stages=2)
        if wide
        else dict(BLOCK_M=32, BLOCK_N=128, BLOCK_M_DQ=128, BLOCK_N_DQ=32, DQ="kernel", num_warps=4, num_stages=3)
    )  # fmt: skip
    knobs = _fit_sequences(spec, knobs)
    for stages in range(int(knobs["num_stages"]), 0, -1):  # fp32 operands take twice the smem
        knobs["num_stages"] = stages
        try:
            validate_attention_backward(spec, knobs)
        except IllegalSpec:
            continue
        break
    return tuple(sorted(knobs.items()))


# Rows longer than 16384 columns loop over blocks of this many; where a later loop reads the
# row again (softmax, the norms: statistics, then the outputs) they start at REREAD_WARPS warps
# instead, one 16-byte access a thread a step: with one or two such programs an SM, the rows in
# flight stay within L2 and the second read hits it (the loads' eviction hints, eviction.py,
# keep them there). H100 sweep of the Triton seed (BENCHMARKS.md, rows, 2026-11-26): faster
# than 8 warps x 4096 columns in 31 of the 32 re-read long-row cases (softmax, log-softmax,
# RMSNorm, LayerNorm; forward and backward; fp32 and bf16; 65536 and 262144 columns), geomean
# 0.93x the time, RMSNorm bf16 forward 0.79x; cross-entropy's one-loop rows keep the default
# (up to 1.3x slower at 32 warps in bf16).
LOOP_BLOCK_C = 4096
REREAD_WARPS = 32
# Rows at least this long may also run row-resident (templates/cluster.py); shorter ones fit a
# Triton program's registers whole.
CLUSTER_MIN_COLS = 1024
# Columns per step where a reduction's columns are strided and its rows contiguous: 32 rows x
# 64 columns a tile, each warp reading 32 consecutive rows of a column (templates/rowwise.py
# gives such rows their own grid axis so Triton lays the tile out along them).
STRIDED_BLOCK_C = 64
# Split rows (templates/rowsplit.py) where the rows are fewer than half this many programs:
# two per SM of an H100 (132 SMs); each program steps through its chunk SPLIT_BLOCK_C columns
# at a time (the row template's looped block).
SPLIT_PROGRAMS = 264
SPLIT_BLOCK_C = 4096
# Long programs holding two rows or more (the backwards of softmax and RMSNorm) start with the
# rows in shared memory at this many warps, in the fewest CTAs that leave room for a second CTA
# on the SM (else for one): in the H100 sweeps of every cluster configuration (BENCHMARKS.md,
# 2026-11-26; float32 and bf16, 65536 and 262144 columns) that form was the fastest or within
# 3% of it in all 8 such cases, where 16 warps split, the forward's winner and the default
# before, was 1.42x and 1.87x off in the two cases that timed it.
SHARED_FIRST_WARPS = 4
# Rows at least this long start split (half of each thread's values in registers, half in
# shared memory: twice the CTAs an SM holds) at 16 warps: on the H100 that form won the float32
# softmax sweep at 65536 and 262144 columns (0.728 / 0.765 ms against 0.772 / 0.839 for the
# best register-held forms; BENCHMARKS.md, rows); shorter rows start register-held.
SPLIT_MIN_COLS = 32768


def _library_alternatives(seed: KernelSpec) -> list[KernelSpec]:
    """A GEMM whose epilogue cuBLASLt fuses (bias + ReLU), or a float32 GEMM under tf32x3 or
    tf32, as library calls (templates/library.py)."""
    from .templates.library import library_epilogue

    if library_epilogue(seed) is None:
        return []
    return [dataclasses.replace(seed, template="gemm_library", knobs=())]


def _padded_alternatives(seed: KernelSpec) -> list[KernelSpec]:
    """A GEMM that breaks 16-byte alignment (an LM head's vocabulary of 50257) as the
    library's aligned GEMM on zero-padded operands (templates/padded.py); none where it is
    aligned or its epilogue has no torch form there."""
    from .templates.padded import padded_problem

    why = padded_problem(seed)
    if why is not None:
        log.debug("no gemm_padded alternative for %s: %s", seed.pattern, why)
        return []
    return [dataclasses.replace(seed, template="gemm_padded", knobs=())]


def alternatives(seed: KernelSpec) -> list[KernelSpec]:
    """Other templates for the same program, each at its default knobs: the search measures
    them beside the seed. A GEMM with a bias + ReLU epilogue may run as cuBLASLt's fused call
    ("gemm_library"); an unaligned one as the library's aligned GEMM on padded operands
    ("gemm_padded"); a 16-bit one whose epilogue CUTLASS's visitor computes, as the CUTLASS 3
    warp-specialised GEMM ("gemm_cutlass", cutlass_match.py); a dense channels-last convolution
    or its backward as CUTLASS's Hopper conv ("conv_cutlass", cutlass_conv_match.py). A long row
    program may run row-resident as CUDA C++ ("row_cluster"): the widest vectors, then the
    fewest warps, then the fewest CTAs per row that hold the row with at most 64 values per
    thread, a softmax's statistics in one (max, sum) exchange (ONLINE=pair) where the program
    has them; rows of SPLIT_MIN_COLS or more start with half
    of those values in shared memory (HOLD=split) at 16 warps, and where no register share
    fits all of them (HOLD=shared). Long programs holding two rows or more (backwards) start
    with every row in shared memory at 4 warps, in the fewest CTAs whose share takes at most
    half an SM's shared memory (SHARED_FIRST_WARPS). Small CTAs share an SM, so one CTA's reductions
    and cluster barriers overlap the others' memory traffic: on the H100 4 warps x 8 CTAs took
    0.80 ms for a float32 4096x65536 softmax where 32 warps x 2 CTAs took 0.89 ms."""
    if seed.template == "gemm":
        from .cutlass_match import cutlass_specs

        return _library_alternatives(seed) + _padded_alternatives(seed) + cutlass_specs(seed)[:1]
    if seed.template in ("conv", "conv_backward"):
        from .cutlass_conv_match import conv_cutlass_specs

        return conv_cutlass_specs(seed)[:1]
    if seed.template != "row_reduction":
        return []
    return _cluster_alternatives(seed) + _split_alternatives(seed)


def seed_configs(seed: KernelSpec) -> list[KernelSpec]:
    """Other configurations of the seed's own template worth measuring beside it before the
    search moves one knob at a time: for a GEMM, a few of Inductor's max-autotune tiles
    (gemm_configs.seed_configs), for a convolution a few implicit-GEMM or depthwise tiles
    (conv_rules.conv_seed_configs), for a row program whose column loop computes a variance
    its one-pass form (VARIANCE=welford); none for other templates."""
    if seed.template == "gemm":
        configs = gemm_seed_configs(seed)
    elif seed.template in CONV_TEMPLATES:
        configs = conv_seed_configs(seed)
    elif seed.template == "row_reduction":
        configs = [dict(VARIANCE="welford")]  # where a column loop has a variance (knobs.py)
    else:
        return []
    out: list[KernelSpec] = []
    for knobs in configs:
        try:
            spec = seed.with_knobs(**knobs)
        except IllegalSpec:
            continue
        if spec != seed and spec not in out:
            out.append(spec)
    return out


def _split_alternatives(seed: KernelSpec) -> list[KernelSpec]:
    """Few long rows (a loss's mean over every element: one row) as split rows
    (templates/rowsplit.py): SPLIT programs a row, about SPLIT_PROGRAMS in all, BLOCK_C columns
    a step; none where the rows alone fill the GPU or the program is not a one-wave reduction
    to per-row outputs."""
    from .split_rules import split_problem

    rows, cols = rows_cols(seed)
    n_rows, n_cols = extent(seed, rows), extent(seed, cols)
    block = min(SPLIT_BLOCK_C, next_pow2(n_cols))
    if 2 * n_rows > SPLIT_PROGRAMS or n_cols < 2 * block or split_problem(seed) is not None:
        return []
    split = next_pow2(-(-SPLIT_PROGRAMS // n_rows))
    split = max(2, min(1024, split, next_pow2(n_cols) // block))
    knobs: dict[str, KnobValue] = dict(SPLIT=split, BLOCK_C=block, num_warps=8, num_stages=1)
    try:
        return [dataclasses.replace(seed, template="row_split", knobs=tuple(sorted(knobs.items())))]
    except IllegalSpec as e:
        log.info("no row_split alternative for %s %s: %s", seed.pattern, seed.domain, e)
        return []


def _cluster_alternatives(seed: KernelSpec) -> list[KernelSpec]:
    _, cols = rows_cols(seed)
    if extent(seed, cols) < CLUSTER_MIN_COLS:
        return []
    import itertools

    from .cluster_rules import (
        MAX_RESIDENT,
        SHARED_LIMIT,
        cluster_shape,
        pair_reductions,
        resident_loads,
    )
    from .templates.cluster import render_cluster

    online = "pair" if pair_reductions(seed, cols) else "wave"
    # (HOLD, warps in the order tried, the most shared memory a CTA may take)
    forms: list[tuple[str, tuple[int, ...], int]] = [("registers", (4, 8, 16, 32), SHARED_LIMIT)]
    if extent(seed, cols) >= SPLIT_MIN_COLS:
        forms.insert(0, ("split", (16, 8, 32, 4), SHARED_LIMIT))
        forms.append(("shared", (16, 8, 32, 4), SHARED_LIMIT))  # registers can't hold them
        if len(resident_loads(seed, cols)) >= 2:  # room for two CTAs an SM, else for one
            forms[:0] = [
                ("shared", (SHARED_FIRST_WARPS,), SHARED_LIMIT // 2),
                ("shared", (SHARED_FIRST_WARPS,), SHARED_LIMIT),
            ]
    order = [
        (hold, vec, warps, cluster, most)
        for hold, warp_order, most in forms
        for vec, warps, cluster in itertools.product((8, 4, 2, 1), warp_order, (1, 2, 4, 8, 16))
    ]
    why = "no legal shape"
    for hold, vec, warps, cluster, most in order:
        knobs: dict[str, KnobValue] = dict(
            CLUSTER=cluster, VEC=vec, num_warps=warps, ONLINE=online, HOLD=hold
        )
        shape = cluster_shape(seed, knobs)
        if hold != "shared" and shape.elements * max(1, len(shape.resident)) > MAX_RESIDENT:
            continue
        if shape.shared_offsets()[1] > most:
            continue
        try:
            spec = dataclasses.replace(
                seed, template="row_cluster", knobs=tuple(sorted(knobs.items()))
            )
        except IllegalSpec as e:
            why = str(e)  # the last: the narrowest vectors, the widest cluster
            continue
        try:
            render_cluster(spec)
        except Unsupported as e:  # an op or dtype the CUDA op table lacks
            log.info("no row_cluster alternative for %s %s: %s", seed.pattern, seed.domain, e)
            return []
        return [spec]
    log.info("no row_cluster alternative for %s %s: %s", seed.pattern, seed.domain, why)
    return []
