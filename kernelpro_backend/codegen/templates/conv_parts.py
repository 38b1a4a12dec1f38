"""The small parts every convolution template shares: masked loads, the joined mask, and
whether offsets need 64 bits.

Owns: `and_`, `load`, `wide`.
Must not: lower aten, render a whole kernel or launch anything.
"""

from __future__ import annotations

from ..spec import KernelSpec


def and_(parts: list[str]) -> str | None:
    return " & ".join(f"({p})" for p in parts) if parts else None


def load(ptrs: str, mask: str | None) -> str:
    return f"tl.load({ptrs}, mask={mask}, other=0.0)" if mask else f"tl.load({ptrs})"


def wide(spec: KernelSpec) -> bool:
    """Whether an offset into some tensor may pass 2**31: then rows and channels are int64."""
    return any(
        sum((d - 1) * abs(st) for d, st in zip(shape, stride, strict=True)) >= 2**31 - 1
        for shape, stride, _ in (*spec.inputs, *spec.outputs)
    )
