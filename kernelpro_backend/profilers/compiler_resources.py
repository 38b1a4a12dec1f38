"""The compiler-resource tool: registers, shared memory and spills per kernel, as the compiler
reports them (`ptxas -v` text, or Triton's compiled-kernel metadata), and what they cost.

Owns: `KernelResources`, `parse_ptxas_report`, `resources_of_triton`, `resource_findings`
(spills, register-limited occupancy, shared memory per block, and an info line with the
registers, shared memory and spills of every kernel) and `CompilerResourceTool`.
Must not: compile or launch anything.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from .findings import Finding, Severity
from .suggest import fewer_registers, less_shared_memory
from .target import ALL_CLASSES, ProfileTarget

TOOL = "ptxas"
# Hopper SM: 65536 registers, 64 resident warps, 228 KB shared memory (227 KB per block).
REGISTERS_PER_SM = 65536
MAX_WARPS_PER_SM = 64
SHARED_PER_SM = 228 * 1024


@dataclasses.dataclass(frozen=True)
class KernelResources:
    name: str
    registers: int | None = None
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    stack_bytes: int = 0
    shared_bytes: int = 0
    num_warps: int | None = None
    arch: str | None = None

    @property
    def spill_bytes(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas_report(text: str) -> list[KernelResources]:
    """Entry functions in a `ptxas -v` (or `nvcc -Xptxas -v`) report, in order."""
    fields: dict[str, dict[str, Any]] = {}
    current: str | None = None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            current = m.group(1)
            fields.setdefault(current, {"name": current})["arch"] = m.group(2)
        elif m := _PROPS.search(line):
            current = m.group(1)
            fields.setdefault(current, {"name": current})
        elif current is not None and (m := _FRAME.search(line)):
            entry = fields[current]
            entry["stack_bytes"], entry["spill_store_bytes"], entry["spill_load_bytes"] = map(
                int, m.groups()
            )
        if current is not None and (m := _USED.search(line)):
            fields[current]["registers"] = int(m.group(1))
            if s := _SMEM.search(line):
                fields[current]["shared_bytes"] = int(s.group(1))
    return [KernelResources(**f) for f in fields.values() if "registers" in f]


def resources_of_triton(kernel: Any) -> KernelResources:
    """From a Triton CompiledKernel after its first launch (n_regs/n_spills are set on load).

    `n_spills` is the local memory per thread in bytes (spills plus local arrays)."""
    meta = kernel.metadata
    n_regs = getattr(kernel, "n_regs", None)
    n_spills = getattr(kernel, "n_spills", None)
    if n_regs is None:
        init = getattr(kernel, "_init_handles", None)
        if init is not None:
            init()
            n_regs, n_spills = kernel.n_regs, kernel.n_spills
    return KernelResources(
        name=getattr(kernel, "name", getattr(meta, "name", "?")),
        registers=int(n_regs) if n_regs is not None else None,
        spill_store_bytes=int(n_spills or 0),
        shared_bytes=int(getattr(meta, "shared", 0) or 0),
        num_warps=int(getattr(meta, "num_warps", 0) or 0) or None,
    )


def occupancy_limit_from_registers(registers: int, num_warps: int) -> float:
    """Fraction of an SM's warp slots usable when registers are the only limit."""
    per_warp = ((registers * 32 + 255) // 256) * 256  # allocated per warp in units of 256
    blocks = REGISTERS_PER_SM // (per_warp * num_warps)
    return min(blocks * num_warps, MAX_WARPS_PER_SM) / MAX_WARPS_PER_SM


def resource_findings(
    res: KernelResources, knobs: Mapping[str, Any] | None = None
) -> list[Finding]:
    knobs = dict(knobs or {})
    if res.num_warps and "num_warps" not in knobs:
        knobs["num_warps"] = res.num_warps
    out = []

    def add(
        metric: str,
        value: float,
        threshold: float,
        severity: Severity,
        guidance: str,
        fix: Mapping[str, Any],
    ) -> None:
        out.append(
            Finding(TOOL, metric, value, threshold, severity, guidance, tuple(sorted(fix.items())))
        )

    if res.spill_bytes:
        add(
            "spill_bytes",
            res.spill_bytes,
            0,
            Severity.HIGH,
            f"{res.name}: {res.spill_store_bytes} bytes spill stores / {res.spill_load_bytes} bytes "
            f"spill loads per thread at {res.registers} registers: live values do not fit in "
            "registers. Spread the tile over more warps or shrink it.",
            fewer_registers(knobs),
        )
    elif res.stack_bytes:
        add(
            "stack_frame_bytes",
            res.stack_bytes,
            0,
            Severity.MEDIUM,
            f"{res.name}: {res.stack_bytes}-byte stack frame per thread (local arrays indexed at "
            "run time live in local memory); use compile-time indices or smaller per-thread arrays.",
            fewer_registers(knobs),
        )
    warps = knobs.get("num_warps")
    if res.registers and isinstance(warps, int) and warps > 0:
        limit = occupancy_limit_from_registers(res.registers, warps)
        if limit < 0.5 and res.registers > 64:
            add(
                "register_limited_occupancy_pct",
                round(100 * limit, 1),
                50.0,
                Severity.MEDIUM if limit >= 0.25 else Severity.HIGH,
                f"{res.registers} registers/thread x {warps} warps allow only {100 * limit:.0f}% of "
                "warp slots per SM: less latency hiding. Cut live state per thread.",
                fewer_registers(knobs),
            )
    if res.shared_bytes > SHARED_PER_SM // 2:
        add(
            "shared_memory_bytes",
            res.shared_bytes,
            SHARED_PER_SM // 2,
            Severity.LOW,
            f"{res.shared_bytes // 1024} KB shared memory per program: one program per SM, so no "
            "other program overlaps its loads; fewer pipeline stages or a smaller BLOCK_K halve it.",
            less_shared_memory(knobs),
        )
    if res.registers:  # what the compiler allotted, even when nothing above is wrong
        warps_text = f" x {warps} warps" if isinstance(warps, int) and warps > 0 else ""
        out.append(
            Finding(
                TOOL,
                "registers_per_thread",
                res.registers,
                None,
                Severity.INFO,
                f"{res.name}: {res.registers} registers/thread{warps_text}, "
                f"{res.shared_bytes} bytes shared memory, {res.spill_bytes} bytes spilled.",
            )
        )
    return out


class CompilerResourceTool:
    name = "ptxas"
    applies_to = ALL_CLASSES  # free: reads metadata the compiler already wrote
    cost_s = 0.0

    def available(self) -> str | None:
        return None

    def run(self, target: ProfileTarget) -> list[Finding]:
        resources = [resources_of_triton(k) for k in target.compiled]
        if target.ptxas_report:
            resources += parse_ptxas_report(target.ptxas_report)
        if not resources:
            raise ValueError("the ptxas tool needs compiled Triton kernels or a `ptxas -v` report")
        return [f for r in resources for f in resource_findings(r, target.knobs)]
