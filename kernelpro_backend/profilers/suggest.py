"""Knob arithmetic shared by the tools: turn "needs more programs / fewer registers / wider
loads" into concrete KernelSpec knob changes, using the candidate's current knobs when known.

Owns: small pure functions from (current knobs, measurement) to a suggestion dict.
Must not: check legality (codegen's `KernelSpec.with_knobs` raises `IllegalSpec`; the
proposer skips those) or read profiler output.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _pow2_floor(x: float) -> int:
    n = 1
    while n * 2 <= x:
        n *= 2
    return n


def more_programs(knobs: Mapping[str, Any], grid: int, sm_count: int) -> dict[str, Any]:
    """Less work per program so that the grid reaches >= 2 waves of `sm_count` programs."""
    factor = max(2, _pow2_floor(2 * sm_count / max(grid, 1)))
    rows = knobs.get("rows_per_program")
    if isinstance(rows, int) and rows > 1:
        return {"rows_per_program": max(1, _pow2_floor(rows / factor))}
    for tile in ("BLOCK_M", "BLOCK_N", "BLOCK"):
        size = knobs.get(tile)
        if isinstance(size, int) and size > 16:
            return {tile: max(16, _pow2_floor(size / factor))}
    split = knobs.get("split_k")
    if isinstance(split, int) or "BLOCK_K" in knobs:
        return {"split_k": min(16, max(2, (split or 1) * factor))}
    if knobs.get("persistent") is True:
        return {"persistent": False}
    return {"rows_per_program": 1}


def fewer_registers(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """Less live state per thread: more warps share the tile, or a smaller tile."""
    warps = knobs.get("num_warps")
    if isinstance(warps, int) and warps < 8:
        return {"num_warps": warps * 2 if warps >= 2 else 4}
    for tile in ("BLOCK", "BLOCK_N", "BLOCK_M", "BLOCK_K"):
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
    """16-byte accesses per thread (LDG.E.128): 4 fp32 or 8 bf16 elements."""
    width = knobs.get("vector_width")
    target = max(1, 16 // max(bytes_per_element, 1))
    if isinstance(width, int) and width >= target:
        return {}
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
