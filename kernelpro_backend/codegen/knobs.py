"""Knobs: each template's knobs, their roles and legal values, and the limits.

Owns: each template's knobs and their roles (`KnobRole`, `knob_roles(spec)`: what the search's
rules move), `knob_space(spec)` (legal values per knob, the search's moves), `validate(spec)`,
which raises `IllegalSpec` naming the value, the limit and what to change, `tma_problem(spec)`
(when a GEMM cannot use TMA loads) and `with_added_knobs` (knobs added since a spec was cached,
at the value of the older kernel).
Limits are H100/H200 ones: 227 KiB shared memory per block, 64 K registers per SM.
Must not: import spec.py (`KernelSpec` validates itself through this module; knobs are read
through `spec_view.SpecView`) or choose defaults (defaults.py and gemm_configs.py do); render
or measure.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from .attention_rules import SMEM_BYTES, validate_attention, validate_attention_backward
from .conv_rules import CONV_SPACE, CONV_TEMPLATES, validate_conv
from .cutlass_conv_match import SPACE as CUTLASS_CONV_SPACE
from .cutlass_match import SPACE as CUTLASS_SPACE
from .domain import next_pow2
from .errors import IllegalSpec
from .row_rules import validate_rowwise

if TYPE_CHECKING:
    from .spec_view import KnobValue, SpecView

# A split-K GEMM's float32 partials (SPLIT_K x its output): scratch the memory plan does not
# count, within its margin (memory.CONTEXT_BYTES). A GEMM whose tiles fill the GPU needs none.
SPLIT_K_PARTIAL_BYTES = 64 * 2**20
_POW2 = tuple(2**i for i in range(17))
_SPACE: dict[str, dict[str, tuple[KnobValue, ...]]] = {
    "gemm": {
        "BLOCK_M": (16, 32, 64, 128, 256),
        "BLOCK_N": (16, 32, 64, 128, 256),
        "BLOCK_K": (16, 32, 64, 128),
        "GROUP_M": (1, 4, 8, 16),
        "LOADS": ("pointer", "tma"),
        "SPLIT_K": (1, 2, 4, 8, 16),
        "PERSISTENT": (False, True),
        # a persistent program's tile loop flattened with its K loop into one software
        # pipeline: the next tile's first loads are in flight during this tile's epilogue
        "FLATTEN": (False, True),
        # persistent programs per SM: 2 lets one program's epilogue overlap the other's main
        # loop where registers and shared memory hold two
        "SM_PROGRAMS": (1, 2),
        # the epilogue runs on 1, 2 or 4 column slices of the tile, one after the other: fewer
        # epilogue values live at once (an erf per element spilled the 128x256 tile)
        "EPILOGUE_SUBTILE": (1, 2, 4),
        "num_warps": (2, 4, 8),
        "num_stages": (1, 2, 3, 4, 5),
    },
    "row_reduction": {
        "ROWS": _POW2[:9],
        "BLOCK_C": _POW2,
        "num_warps": (1, 2, 4, 8, 16, 32),
        "num_stages": (1, 2, 3),
        # a column loop's online max and sum of exp: per lane (two exps an element, no
        # reduction in the loop) or per block (one exp an element, two reductions a step)
        "ONLINE": ("lane", "block"),
        # a column loop's sum and the sum of squared deviations from its mean (a variance):
        # one pass each, or one pass for both by Welford's running mean and M2 per lane
        "VARIANCE": ("passes", "welford"),
        # programs as a share of the SMs, in percent (200: two an SM), each looping over row
        # blocks; 0: one program a block, no loop. The same bytes from fewer SMs: a
        # memory-bound row may keep its time and spend fewer joules (objective "energy")
        "SM_SHARE": (0, 25, 50, 75, 100, 200),
    },
    "attention": {
        "BLOCK_M": (16, 32, 64, 128),
        "BLOCK_N": (16, 32, 64, 128),
        "num_warps": (2, 4, 8),
        "num_stages": (1, 2, 3, 4),
    },
    "attention_backward": {
        "BLOCK_M": (16, 32, 64, 128),  # query rows per step of the dK/dV kernel
        "BLOCK_N": (16, 32, 64, 128),  # keys per dK/dV program
        "BLOCK_M_DQ": (16, 32, 64, 128),  # query rows per dQ (and preprocess) program
        "BLOCK_N_DQ": (16, 32, 64, 128),  # keys per step of the dQ kernel
        "DQ": ("kernel", "atomic"),  # dQ by its own kernel, or atomically from dK/dV programs
        "num_warps": (2, 4, 8),
        "num_stages": (1, 2, 3, 4),
    },
}
_SPACE["pointwise"] = {
    k: v for k, v in _SPACE["row_reduction"].items() if k not in ("ONLINE", "VARIANCE")
}
_SPACE.update(CONV_SPACE)  # the convolution forward templates (conv_rules.py)
# The row-resident CUDA kernel (templates/cluster.py): CTAs per row, elements per vector access
# and warps per CTA; cluster_rules.py says which combinations fit a row.
_SPACE["gemm_library"] = {}  # a library call: nothing to tune (templates/library.py)
_SPACE["gemm_padded"] = {}  # the library's aligned GEMM on padded operands (templates/padded.py)
_SPACE["gemm_cutlass"] = CUTLASS_SPACE  # the CUTLASS 3 GEMM (cutlass_match.py)
_SPACE["conv_cutlass"] = CUTLASS_CONV_SPACE  # CUTLASS's Hopper conv (cutlass_conv_match.py)
_SPACE["row_cluster"] = {
    "CLUSTER": (1, 2, 4, 8, 16),
    "VEC": (1, 2, 4, 8),
    "num_warps": (1, 2, 4, 8, 16, 32),
    # a softmax's max and sum of exp: two reduction waves (a block and a cluster barrier
    # each), or one wave exchanging (max, sum) pairs
    "ONLINE": ("wave", "pair"),
    # the row's share each CTA keeps on chip: in its threads' registers, in shared memory
    # (copied there by cp.async: no register limit, so more CTAs, more rows, fit an SM), or
    # half of each thread's vectors in each (both budgets: twice the CTAs of either alone)
    "HOLD": ("registers", "shared", "split"),
}

# Split rows (templates/rowsplit.py): programs per row, columns per step of each program's chunk
_SPACE["row_split"] = {
    "SPLIT": _POW2[1:11],
    "BLOCK_C": _POW2,
    "num_warps": (1, 2, 4, 8, 16, 32),
    "num_stages": (1, 2, 3),
}


class KnobRole(str, enum.Enum):
    """What a knob does, in the search's vocabulary: search/rules.py moves knobs by role (a
    memory-bound kernel wants more rows per program, a spilling one a smaller tile), never by
    name. A `str`, so the search (which does not import codegen) sees the plain value."""

    TILE = "tile"
    VECTOR = "vector"
    ROWS = "rows"
    PASSES = "passes"
    PERSISTENT = "persistent"
    SPLIT = "split"
    PROGRAMS = "programs"  # how many programs the grid holds (SM_SHARE)
    WARPS = "warps"
    STAGES = "stages"
    PRECISION = "precision"
    SUBTILE = "subtile"
    OTHER = "other"  # no rule moves it; the search's one-knob neighbour steps still do


# Every knob of _SPACE has a role (a name means the same in every template that has it).
ROLES: dict[str, KnobRole] = {
    "BLOCK_M": KnobRole.TILE,
    "BLOCK_N": KnobRole.TILE,
    "BLOCK_K": KnobRole.TILE,
    "BLOCK_C": KnobRole.TILE,
    # The dQ kernel's blocks, the GEMM's program order and load path and the dQ strategy have
    # no rule (none of the bottleneck rules says which way they should go): neighbours only.
    "BLOCK_M_DQ": KnobRole.OTHER,
    "BLOCK_N_DQ": KnobRole.OTHER,
    "WG_BLOCK_M": KnobRole.TILE,  # a conv backward's weight-gradient tile (conv_rules.py)
    "WG_BLOCK_N": KnobRole.TILE,
    "WG_BLOCK_K": KnobRole.TILE,
    "GROUP_M": KnobRole.OTHER,
    "PACK_W": KnobRole.OTHER,  # a conv's weight repacked before its main loop (conv_rules.py)
    "PACK_X": KnobRole.OTHER,  # a conv wgrad's input rounded to tf32 first (conv_rules.py)
    "FLATTEN": KnobRole.OTHER,
    "SM_PROGRAMS": KnobRole.OTHER,
    "LOADS": KnobRole.OTHER,
    "ONLINE": KnobRole.OTHER,
    "VARIANCE": KnobRole.OTHER,
    "HOLD": KnobRole.OTHER,
    "SCHEDULE": KnobRole.OTHER,
    "CLUSTER_M": KnobRole.OTHER,
    "TILE_N": KnobRole.TILE,
    "DQ": KnobRole.OTHER,
    "ROWS": KnobRole.ROWS,
    "WG_ROWS": KnobRole.ROWS,  # a depthwise weight gradient's output rows a step (conv_dw_rules)
    "SPLIT_K": KnobRole.SPLIT,
    "CLUSTER": KnobRole.SPLIT,  # more CTAs share a row: more parallelism, fewer values each
    "SPLIT": KnobRole.SPLIT,  # more programs share a row (row_split)
    "SM_SHARE": KnobRole.PROGRAMS,
    "VEC": KnobRole.VECTOR,
    "PERSISTENT": KnobRole.PERSISTENT,
    "EPILOGUE_SUBTILE": KnobRole.SUBTILE,
    "num_warps": KnobRole.WARPS,
    "num_stages": KnobRole.STAGES,
}
# Knobs added after specs were cached, with the value that reproduces the older kernels:
# `SpecView.from_json` fills them in, so cached specs keep loading.
ADDED_KNOBS: dict[str, dict[str, KnobValue]] = {
    "gemm": {"LOADS": "pointer", "EPILOGUE_SUBTILE": 1, "FLATTEN": False, "SM_PROGRAMS": 1},
    "row_reduction": {"ONLINE": "lane", "VARIANCE": "passes", "SM_SHARE": 0},
    "pointwise": {"SM_SHARE": 0},
    "row_cluster": {"ONLINE": "wave", "HOLD": "registers"},
    "conv_depthwise": {"ROWS": 0},
    "conv_depthwise_backward": {"ROWS": 0, "WG_ROWS": 0},
}


def with_added_knobs(template: str, knobs: tuple[tuple[str, KnobValue], ...]) -> tuple:
    """`knobs` (sorted pairs) completed with knobs added since a spec was written."""
    if not knobs:
        return knobs
    present = dict(knobs)
    added = {k: v for k, v in ADDED_KNOBS.get(template, {}).items() if k not in present}
    return tuple(sorted({**present, **added}.items())) if added else knobs


def _elt_bytes(spec: SpecView) -> int:
    dt = dict(spec.anchor).get("operand_dtype", "float32")
    return 4 if dt == "float32" else 2


def knob_roles(spec: SpecView) -> dict[str, KnobRole]:
    """The role of each of the spec's template's knobs."""
    return {name: ROLES[name] for name in _SPACE[spec.template]}


def knob_space(spec: SpecView) -> dict[str, tuple[KnobValue, ...]]:
    """Legal values of each knob with the others held at the spec's values."""
    space: dict[str, tuple[KnobValue, ...]] = {}
    for name, values in _SPACE[spec.template].items():
        legal = []
        for v in values:
            try:
                spec.with_knobs(**{name: v})
            except IllegalSpec:
                continue
            legal.append(v)
        space[name] = tuple(legal)
    return space


def validate(spec: SpecView) -> None:
    if spec.template == "gemm_library":  # no knobs; legal only for the GEMMs it computes
        from .templates.library import library_epilogue

        if spec.knobs or library_epilogue(spec) is None:
            raise IllegalSpec(
                "gemm_library computes relu(a @ b + bias), or a float32 GEMM with an "
                "elementwise epilogue under tf32x3 or tf32, only, with no knobs"
            )
        return
    if spec.template == "gemm_padded":  # no knobs; legal only for an unaligned GEMM
        from .templates.padded import padded_problem

        why = "it takes no knobs" if spec.knobs else padded_problem(spec)
        if why:
            raise IllegalSpec(f"gemm_padded cannot compute this GEMM: {why}")
        return
    if not spec.knobs:
        return
    knobs = dict(spec.knobs)
    space = _SPACE[spec.template]
    if set(knobs) != set(space):
        raise IllegalSpec(
            f"{spec.template} knobs must be exactly {sorted(space)}, got {sorted(knobs)}"
        )
    for name, value in knobs.items():
        if value not in space[name] or type(value) is not type(space[name][0]):
            raise IllegalSpec(f"{name}={value!r} is not one of {space[name]}; pick one of those")
    if spec.template == "gemm":
        _validate_gemm(spec, knobs)
    elif spec.template == "attention":
        validate_attention(spec, knobs)
    elif spec.template in CONV_TEMPLATES:
        validate_conv(spec, knobs)
    elif spec.template == "attention_backward":
        validate_attention_backward(spec, knobs)
    elif spec.template == "gemm_library":
        from .templates.library import library_epilogue

        if library_epilogue(spec) is None:
            raise IllegalSpec(
                "gemm_library computes relu(a @ b + bias), or a float32 GEMM with an "
                "elementwise epilogue under tf32x3 or tf32, only; this GEMM is neither"
            )
    elif spec.template == "gemm_cutlass":
        from .cutlass_match import cutlass_problem

        problem = cutlass_problem(spec)
        if problem:
            raise IllegalSpec(f"gemm_cutlass cannot compute this GEMM: {problem}")
    elif spec.template == "conv_cutlass":
        from .cutlass_conv_match import conv_cutlass_problem

        problem = conv_cutlass_problem(spec)
        if problem:
            raise IllegalSpec(f"conv_cutlass cannot compute this convolution: {problem}")
    elif spec.template == "row_cluster":
        from .cluster_rules import cluster_problem

        problem = cluster_problem(spec, knobs)
        if problem:
            raise IllegalSpec(f"row_cluster with {knobs}: {problem}")
    elif spec.template == "row_split":
        from .split_rules import validate_split

        validate_split(spec, knobs)
    else:
        validate_rowwise(spec, knobs)


def _validate_gemm(spec: SpecView, k: dict) -> None:
    bm, bn, bk, stages = k["BLOCK_M"], k["BLOCK_N"], k["BLOCK_K"], k["num_stages"]
    smem = (bm * bk + bk * bn) * _elt_bytes(spec) * stages
    if smem > SMEM_BYTES:
        raise IllegalSpec(
            f"BLOCK_M={bm}, BLOCK_N={bn}, BLOCK_K={bk}, num_stages={stages} need {smem} bytes of "
            f"shared memory; the limit is {SMEM_BYTES}. Reducing block sizes or num_stages may help"
        )
    regs = bm * bn // (32 * k["num_warps"])
    if regs > 256:
        raise IllegalSpec(
            f"a {bm}x{bn} fp32 accumulator over {k['num_warps']} warps is {regs} registers per "
            "thread; the limit is 255. Use more warps or a smaller tile"
        )
    if spec.reduced and bn < spec.param("n"):
        raise IllegalSpec(
            f"BLOCK_N={bn} < N={spec.param('n')}: the epilogue's row reductions need the whole "
            f"row in one tile; use BLOCK_N >= {next_pow2(spec.param('n'))}"
        )
    if k["LOADS"] == "tma":
        problem = tma_problem(spec)
        if problem:
            raise IllegalSpec(
                f"LOADS='tma' needs TMA-compatible operands: {problem}; use 'pointer'"
            )
    _validate_subtile(spec, k)
    if k["FLATTEN"] and not k["PERSISTENT"]:
        raise IllegalSpec(
            "FLATTEN=True pipelines a persistent program's loop over its tiles; with "
            "PERSISTENT=False there is one tile per program: use FLATTEN=False or PERSISTENT=True"
        )
    if k["SM_PROGRAMS"] > 1 and not k["PERSISTENT"]:
        raise IllegalSpec(
            f"SM_PROGRAMS={k['SM_PROGRAMS']} sizes a persistent grid; with PERSISTENT=False the "
            "grid has a program per tile: use SM_PROGRAMS=1 or PERSISTENT=True"
        )
    if k["SM_PROGRAMS"] > 1 and smem * k["SM_PROGRAMS"] > SMEM_BYTES:
        raise IllegalSpec(
            f"SM_PROGRAMS={k['SM_PROGRAMS']} programs of {smem} bytes of shared memory each do "
            f"not fit one SM's {SMEM_BYTES}; use SM_PROGRAMS=1 or fewer stages or smaller blocks"
        )
    if k["SPLIT_K"] > 1:
        _validate_split_k(spec, k)


def _validate_split_k(spec: SpecView, k: dict) -> None:
    split, bk = k["SPLIT_K"], k["BLOCK_K"]
    if k["PERSISTENT"]:
        raise IllegalSpec(
            f"SPLIT_K={split} gives each program one tile's share of K; a persistent program "
            "loops over whole tiles: use SPLIT_K=1 or PERSISTENT=False"
        )
    if spec.param("k") < split * bk:
        raise IllegalSpec(
            f"SPLIT_K={split} x BLOCK_K={bk} exceeds K={spec.param('k')}; use fewer splits"
        )
    partial = split * spec.param("batch") * spec.param("m") * spec.param("n") * 4
    if partial > SPLIT_K_PARTIAL_BYTES:
        raise IllegalSpec(
            f"SPLIT_K={split} stores {partial / 2**20:.0f} MiB of float32 partials (the limit is "
            f"{SPLIT_K_PARTIAL_BYTES // 2**20} MiB): split-K pays where the output is small next "
            "to K; use fewer splits or SPLIT_K=1"
        )


def _validate_subtile(spec: SpecView, k: dict) -> None:
    parts = k["EPILOGUE_SUBTILE"]
    if parts == 1:
        return
    why = None
    if spec.reduced:
        why = "the epilogue's row reductions need the whole row of the tile at once"
    elif k["BLOCK_N"] // parts < 16:
        why = f"BLOCK_N={k['BLOCK_N']} in {parts} slices is under 16 columns each"
    if why:
        raise IllegalSpec(f"EPILOGUE_SUBTILE={parts}: {why}; use EPILOGUE_SUBTILE=1")


def tma_problem(spec: SpecView) -> str | None:
    """Why a GEMM's operands cannot be read through TMA descriptors, or None if they can: each
    operand needs one unit-stride axis (row- or column-major), and its other strides and its
    offset must be multiples of 16 bytes (the descriptor's base address and row pitch)."""
    elt = _elt_bytes(spec)
    for name in ("a", "b"):
        _, offset, (s_batch, s_row, s_col) = spec.param(name)
        if 1 not in (s_row, s_col):
            return f"operand {name} has strides {(s_row, s_col)} with no unit stride"
        pitch = s_row if s_col == 1 else s_col
        for what, value in (("row pitch", pitch), ("batch stride", s_batch), ("offset", offset)):
            if value * elt % 16:
                return f"operand {name}'s {what} is {value * elt} bytes, not a multiple of 16"
    return None
