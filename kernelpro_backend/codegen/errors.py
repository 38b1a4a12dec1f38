"""The error types of code generation.

Owns: `IllegalSpec` (a spec whose knob values cannot work: the message names the value, the
limit and what to change, like Triton's OutOfResources), `Unsupported` (a subgraph no template
covers: the message says why) and its case `MapConflict` (a value needed at an index map the
kernel cannot give, with the node below which lowering/split.py cuts the subgraph). The search
skips them; none means a bug.
Must not: carry anything but a message (and MapConflict's two nodes).
"""

from __future__ import annotations

from typing import Any


class IllegalSpec(ValueError):
    """A KernelSpec whose knobs break a limit (tile too large, not a power of two, ...)."""


class Unsupported(Exception):
    """No template covers this subgraph; it stays with the fallback."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class MapConflict(Unsupported):
    """A value the kernel would need at an index map it cannot give it: read at two maps (no
    template computes one value at two layouts), a row reduction's result read per column, or
    an output that maps onto no point of the domain.
    `node` is the value; `cut` the node whose part (it and what it depends on) would compute
    apart from the rest (None where no cut helps)."""

    def __init__(self, reason: str, node: Any, cut: Any) -> None:
        super().__init__(reason)
        self.node = node
        self.cut = cut
