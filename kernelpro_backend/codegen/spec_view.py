"""What knob rules read of a kernel spec: the `SpecView` protocol and the value aliases.

Owns: `KnobValue`, `TensorMeta`, `io_names` (a generated entry's argument names) and
`SpecView`, the read-only face of `KernelSpec` that knobs.py validates and sizes. `KernelSpec` validates itself through knobs.py when it is built,
so knobs.py must not import spec.py (not even for types: that is an import cycle); it reads
specs through this protocol, which `KernelSpec` satisfies structurally.
Must not: import spec.py or knobs.py.
"""

from __future__ import annotations

from typing import Any, Protocol

KnobValue = int | str | bool
TensorMeta = tuple[tuple[int, ...], tuple[int, ...], str]


class SpecView(Protocol):
    """The fields and methods of `KernelSpec` that knob rules read."""

    @property
    def template(self) -> str: ...
    @property
    def knobs(self) -> tuple[tuple[str, KnobValue], ...]: ...
    @property
    def precision(self) -> str: ...
    @property
    def inputs(self) -> tuple[TensorMeta, ...]: ...
    @property
    def outputs(self) -> tuple[TensorMeta, ...]: ...
    @property
    def loads(self) -> tuple[tuple[int, int, Any], ...]: ...
    @property
    def domain(self) -> tuple[int, ...]: ...
    @property
    def reduced(self) -> tuple[int, ...]: ...
    @property
    def ops(self) -> tuple[tuple[str, tuple[Any, ...], str], ...]: ...
    @property
    def stores(self) -> tuple[tuple[Any, int, Any, Any], ...]: ...
    @property
    def anchor(self) -> tuple[tuple[str, Any], ...]: ...

    def param(self, name: str) -> Any: ...

    def with_knobs(self, **changes: KnobValue) -> SpecView:
        """A copy with some knobs changed; raises IllegalSpec for illegal values."""
        ...


def io_names(spec: Any) -> tuple[list[str], list[str]]:
    """The names a generated module gives a spec's inputs and outputs: in0.., out0.."""
    return [f"in{i}" for i in range(len(spec.inputs))], [
        f"out{i}" for i in range(len(spec.outputs))
    ]
