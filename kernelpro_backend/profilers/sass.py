"""The SASS tool: read the machine code of a compiled kernel.

Owns: `parse_sass(text)` for `cuobjdump -sass` output (and Triton's `asm["sass"]` form) into
per-function instruction counts, `sass_findings` (register spills as LDL/STL, which matrix
instructions are used, the width of global loads/stores, the instruction mix) and `SassTool`.
Must not: compile kernels (it reads the cubin the compiler produced).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .findings import Bottleneck, Finding, Severity
from .suggest import fewer_registers, wider_loads
from .target import ProfileTarget

TOOL = "sass"
_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
_ADDRESS = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s*(.*)$")
_CONTROL = re.compile(
    r"^[0-9a-fA-F-]{2}:[0-9a-fA-F-]:[0-9a-fA-F-]:[\w-]:\d+\s+(.*)$"
)  # Triton form
_WIDTH_BYTES = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "64": 8, "128": 16, "256": 32}
MATRIX_OPS = ("HGMMA", "HMMA", "IMMA", "QGMMA", "IGMMA", "UTCHMMA", "DMMA")


@dataclasses.dataclass
class SassFunction:
    name: str
    opcodes: Counter[str] = dataclasses.field(default_factory=Counter)  # e.g. "LDG.E.128"

    def count(self, base: str) -> int:
        return sum(n for op, n in self.opcodes.items() if op.split(".")[0] == base)

    @property
    def total(self) -> int:
        return sum(self.opcodes.values())

    def access_widths(self, base: str) -> Counter[int]:
        """Bytes per thread of each `base` ("LDG"/"STG") instruction -> how many there are."""
        widths: Counter[int] = Counter()
        for op, n in self.opcodes.items():
            parts = op.split(".")
            if parts[0] == base:
                width = next((_WIDTH_BYTES[p] for p in parts[1:] if p in _WIDTH_BYTES), 4)
                widths[width] += n
        return widths


def _instruction(line: str) -> str | None:
    text = line.strip()
    m = _ADDRESS.match(text)
    if m:
        text = m.group(1)
    else:
        m = _CONTROL.match(text)
        if not m:
            return None
        text = m.group(1)
    text = text.split("/*")[0].strip().rstrip(";").strip()
    if text.startswith("@"):
        text = text.split(None, 1)[1] if " " in text else ""
    if text.startswith("{"):
        text = text[1:].strip()
    return text.split()[0] if text else None


def parse_sass(text: str) -> list[SassFunction]:
    functions: list[SassFunction] = []
    for line in text.splitlines():
        header = _FUNCTION.match(line)
        if header:
            functions.append(SassFunction(header.group(1)))
            continue
        if not functions:
            continue
        op = _instruction(line)
        if op and op[0].isalpha():
            functions[-1].opcodes[op] += 1
    return functions


def _f(
    metric: str,
    value: float | str,
    threshold: float | str | None,
    severity: Severity,
    guidance: str,
    fix: Mapping[str, Any] | None = None,
) -> Finding:
    return Finding(
        TOOL, metric, value, threshold, severity, guidance, tuple(sorted((fix or {}).items()))
    )


def sass_findings(
    fn: SassFunction,
    knobs: Mapping[str, Any] | None = None,
    *,
    element_bytes: int = 4,
    arch: int = 90,
) -> list[Finding]:
    knobs = knobs or {}
    out = []
    spills = fn.count("LDL") + fn.count("STL")
    if spills:
        out.append(
            _f(
                "local_memory_instructions",
                spills,
                0,
                Severity.HIGH,
                f"{fn.count('STL')} STL and {fn.count('LDL')} LDL instructions: registers spill to "
                "local memory (off-chip, ~500-cycle round trips). Hold less per thread: more warps "
                "per program or a smaller tile.",
                fewer_registers(knobs),
            )
        )
    out += _matrix_findings(fn, knobs, arch)
    for base, what in (("LDG", "loads"), ("STG", "stores")):
        widths = fn.access_widths(base)
        if not widths:
            continue
        widest = max(widths)
        if widest < 16 and element_bytes < 16:
            fix = wider_loads(knobs, element_bytes)
            out.append(
                _f(
                    f"global_{base.lower()}_width_bytes",
                    widest,
                    16,
                    Severity.MEDIUM,
                    f"Global {what} are at most {widest} bytes per thread ({sum(widths.values())} "
                    f"{base} instructions); 16-byte accesses ({base}.E.128) need 4x fewer "
                    "instructions. Vectorise along the contiguous axis (needs 16-byte aligned, "
                    "contiguous data).",
                    fix,
                )
            )
    mix = _mix(fn)
    if mix:
        total = sum(mix.values())
        top = ", ".join(f"{op} {100 * n / total:.0f}%" for op, n in mix.most_common(6))
        out.append(
            _f(
                "instruction_mix",
                top,
                None,
                Severity.INFO,
                f"{total} instructions in {fn.name}: {top}.",
            )
        )
    return out


def _mix(fn: SassFunction) -> Counter[str]:
    mix: Counter[str] = Counter()
    for op, n in fn.opcodes.items():
        if not op.startswith("NOP"):  # alignment padding, never executed
            mix[op.split(".")[0]] += n
    return mix


def find_cuobjdump() -> str | None:
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import triton

        bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        return str(bundled) if bundled.exists() else None
    except ImportError:
        return None


def disassemble(cubin: bytes) -> str:
    tool = find_cuobjdump()
    if tool is None:
        raise RuntimeError(
            "cuobjdump not found: install the CUDA toolkit (or Triton, which bundles it)"
        )
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run(
            [tool, "-sass", f.name], capture_output=True, text=True, check=True
        ).stdout


def _cubins(target: ProfileTarget) -> list[tuple[bytes, int]]:
    found = [(target.cubin, 90)] if target.cubin else []
    for kernel in target.compiled:
        arch = getattr(getattr(kernel.metadata, "target", None), "arch", 90)
        found.append((kernel.asm["cubin"], int(arch) if isinstance(arch, int) else 90))
    return found


class SassTool:
    name = "sass"
    applies_to = frozenset({Bottleneck.MEMORY, Bottleneck.COMPUTE, Bottleneck.UNDERUTILIZED})
    cost_s = 1.0

    def available(self) -> str | None:
        return None if find_cuobjdump() else "cuobjdump not found"

    def run(self, target: ProfileTarget) -> list[Finding]:
        cubins = _cubins(target)
        if not cubins:
            raise ValueError(
                "the SASS tool needs a cubin: pass ProfileTarget.cubin or compiled Triton kernels"
            )
        out = []
        for cubin, arch in cubins:
            for fn in parse_sass(disassemble(cubin)):
                out += sass_findings(
                    fn, target.knobs, element_bytes=target.element_bytes, arch=arch
                )
        return out


def _matrix_findings(fn: SassFunction, knobs: Mapping[str, Any], arch: int) -> list[Finding]:
    """A matmul template (it has BLOCK_K) should run on tensor cores, on Hopper through HGMMA."""
    out: list[Finding] = []
    matrix = {op: fn.count(op) for op in MATRIX_OPS if fn.count(op)}
    ffma = fn.count("FFMA")
    if "BLOCK_K" in knobs:  # a matmul template: it should use tensor cores
        if not matrix:
            out.append(
                _f(
                    "matrix_instructions",
                    f"FFMA only ({ffma})",
                    "HGMMA" if arch >= 90 else "HMMA",
                    Severity.HIGH,
                    "No tensor-core instructions: the matmul runs on FMA units at a fraction of the "
                    "tensor roof. Check the dtype/precision (fp32 'highest' stays on FFMA by policy) "
                    "and that BLOCK_M/N/K are multiples of 16.",
                )
            )
        elif arch >= 90 and "HGMMA" not in matrix:
            warps = knobs.get("num_warps")
            out.append(
                _f(
                    "matrix_instructions",
                    ",".join(matrix),
                    "HGMMA",
                    Severity.MEDIUM,
                    "Uses HMMA (mma.sync) but not Hopper's HGMMA (wgmma): wgmma needs a warpgroup "
                    "(num_warps a multiple of 4) and BLOCK_M >= 64.",
                    {"num_warps": 4} if isinstance(warps, int) and warps < 4 else {"BLOCK_M": 64},
                )
            )
    return out
