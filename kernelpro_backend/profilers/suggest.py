"""Knob arithmetic shared by the tools: turn "needs more programs / fewer registers / wider
loads" into concrete KernelSpec knob changes, using the candidate's current knobs when known.

Owns: small pure functions from (current knobs, measurement) to a suggestion dict.
Must not: check legality (codegen's `KernelSpec.with_knobs` raises `IllegalSpec`; the
proposer skips those) or read profiler output.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Each role's knob names across templates and older specs (codegen/knobs.py names: ROWS,
# BLOCK_C, SPLIT_K, PERSISTENT); a suggestion uses the name the candidate's knobs use.
ROWS = ("ROWS", "rows_per_program")
COLUMN_BLOCK = ("BLOCK_C", "BLOCK")
SPLIT = ("SPLIT_K", "split_k")
PERSISTENT = ("PERSISTENT", "persistent")


def _knob(knobs: Mapping[str, Any], names: tuple[str, ...]) -> tuple[str, Any]:
    """(the name `knobs` uses for this role, its value); (first name, None) when absent."""
    lower = {k.lower(): k for k in knobs}
    for name in names:
        key = lower.get(name.lower())
        if key is not None:
            return key, knobs[key]
    return names[0], None


def _pow2_floor(x: float) -> int:
    n = 1
    while n * 2 <= x:
        n *= 2
    return n


# A GEMM's tiles are made smaller down to this, then its K is split: a tile under 64 rows or
# columns feeds the tensor cores too little per operand load (cuBLAS and CUTLASS split K
# rather than shrink tiles for a small output over a long K).
GEMM_TILE_FLOOR = 64


def more_programs(knobs: Mapping[str, Any], grid: int, sm_count: int) -> dict[str, Any]:
    """Less work per program so that the grid reaches >= 2 waves of `sm_count` programs."""
    factor = max(2, _pow2_floor(2 * sm_count / max(grid, 1)))
    rows_key, rows = _knob(knobs, ROWS)
    if isinstance(rows, int) and rows > 1:
        return {rows_key: max(1, _pow2_floor(rows / factor))}
    floor = GEMM_TILE_FLOOR if "BLOCK_K" in knobs else 16
    for tile in ("BLOCK_M", "BLOCK_N"):
        size = knobs.get(tile)
        if isinstance(size, int) and size > floor:
            return {tile: max(floor, _pow2_floor(size / factor))}
    split_key, split = _knob(knobs, SPLIT)
    if isinstance(split, int) or "BLOCK_K" in knobs:
        return {split_key: min(16, max(2, (split or 1) * factor))}
    persistent_key, persistent = _knob(knobs, PERSISTENT)
    if persistent is True:
        return {persistent_key: False}
    return {rows_key: 1}


def fewer_registers(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """Less live state per thread: more warps share the tile, or a smaller tile."""
    warps = knobs.get("num_warps")
    if isinstance(warps, int) and warps < 8:
        return {"num_warps": warps * 2 if warps >= 2 else 4}
    block_key, block = _knob(knobs, COLUMN_BLOCK)
    if isinstance(block, int) and block > 16:
        return {block_key: block // 2}
    for tile in ("BLOCK_N", "BLOCK_M", "BLOCK_K"):
        size = knobs.get(tile)
        if isinstance(size, int) and size > 16:
            return {tile: size // 2}
    stages = knobs.get("num_stages")
    if isinstance(stages, int) and stages > 2:
        return {"num_stages": stages - 1}
    return {"num_warps": 8}


def less_shared_memory(knobs: Mapping[str, Any]) -> dict[str, Any]:
    stages = knobs.get("num_stages")
    if isinstance(stages, int) and stages > 2:
        return {"num_stages": stages - 1}
    size = knobs.get("BLOCK_K")
    if isinstance(size, int) and size > 16:
        return {"BLOCK_K": size // 2}
    return {"num_stages": 2}


def wider_loads(knobs: Mapping[str, Any], bytes_per_element: int = 4) -> dict[str, Any]:
    """16-byte accesses per thread (LDG.E.128): 4 fp32 or 8 bf16 elements. Templates without a
    vector knob (Triton vectorises a BLOCK_C-wide row block over 32 x num_warps threads) get
    enough BLOCK_C for each thread to hold 16 contiguous bytes, or fewer warps."""
    target = max(1, 16 // max(bytes_per_element, 1))
    width = knobs.get("vector_width")
    if isinstance(width, int):
        return {} if width >= target else {"vector_width": target}
    block_key, block = _knob(knobs, ("BLOCK_C",))  # codegen's pointwise / row templates
    warps = knobs.get("num_warps")
    if isinstance(block, int) and isinstance(warps, int) and warps > 0:
        if block // (32 * warps) >= target:
            return {}
        if warps > 1 and block >= 32 * target:
            return {"num_warps": max(1, _pow2_floor(block / (32 * target)))}
        return {block_key: 32 * warps * target}
    return {"vector_width": target}


def more_latency_hiding(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """Long-scoreboard stalls: more loads in flight (deeper pipeline, more warps)."""
    stages = knobs.get("num_stages")
    if isinstance(stages, int) and stages < 4:
        return {"num_stages": stages + 1}
    warps = knobs.get("num_warps")
    if isinstance(warps, int) and warps < 8:
        return {"num_warps": warps * 2}
    if stages is None:
        return {"num_stages": 3}
    return {}
