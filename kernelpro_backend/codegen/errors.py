"""The two error types of code generation.

Owns: `IllegalSpec` (a spec whose knob values cannot work: the message names the value, the
limit and what to change, like Triton's OutOfResources), `Unsupported` (a subgraph no template
covers: the message says why) and its case `TwoMaps` (a value read at two index maps, with the
node that gave the second one, where lowering/split.py cuts the subgraph). The search skips
them; none means a bug.
Must not: carry anything but a message (and TwoMaps's two nodes).
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


class TwoMaps(Unsupported):
    """A value the subgraph computes (or reads) at two index maps, which no template does:
    `node` the value, `consumer` the node whose read gave it the second map (None where the
    map came from seeding an output)."""

    def __init__(self, reason: str, node: Any, consumer: Any) -> None:
        super().__init__(reason)
        self.node = node
        self.consumer = consumer
