"""The two error types of code generation.

Owns: `IllegalSpec` (a spec whose knob values cannot work: the message names the value, the
limit and what to change, like Triton's OutOfResources) and `Unsupported` (a subgraph no template
covers: the message says why). The search skips both; neither means a bug.
Must not: carry anything but a message.
"""

from __future__ import annotations


class IllegalSpec(ValueError):
    """A KernelSpec whose knobs break a limit (tile too large, not a power of two, ...)."""


class Unsupported(Exception):
    """No template covers this subgraph; it stays with the fallback."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
