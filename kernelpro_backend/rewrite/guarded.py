"""A compiled graph that relied on the values of some of its inputs (a buffer holding a causal
mask, fx_passes/causal_mask.py), called only while those values hold.

Dynamo guards a graph on its inputs' shapes, dtypes and strides, not on a buffer's values. Each
call here checks, on the host, each relied-on input's version counter (every in-place write
bumps it: `copy_`, `load_state_dict`, a DDP broadcast) and storage address (`.to()` or `.data
=` move it): a few µs. When one moved, the values are checked again (one device-to-host read):
still causal, the graph goes on, and the last `STAMPS` checked states of each input are
remembered (two model instances sharing the graph alternate without re-checks); not, or changed
more than `RECHECKS` times (a buffer rewritten every step would pay a read every call), the
graph compiled without relying on any value runs from then on, compiled on first need, with a
log line saying why.

Owns: `ValueGuarded(compiled, inputs, indices, still_valid, recompile, what)`.
Must not: decide which values a graph relies on (the rewrites do) or compile (backend.py does).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch

log = logging.getLogger("kernelpro")

RECHECKS = 3
STAMPS = 4  # checked stamps kept per input


class ValueGuarded:
    """Calls `compiled` while each input at `indices` holds a value for which
    `still_valid(tensor)` is true, else the graph `recompile()` makes. Called as Dynamo calls
    a backend's result: one positional argument per graph input."""

    def __init__(
        self,
        compiled: Callable[..., Any],
        inputs: Sequence[Any],
        indices: Sequence[int],
        still_valid: Callable[[torch.Tensor], bool],
        recompile: Callable[[], Callable[..., Any]],
        what: str,
    ) -> None:
        self._compiled = compiled
        self._still_valid = still_valid
        self._recompile = recompile
        self._what = what
        # Per input, the stamps whose values were checked: a graph Dynamo shares between two
        # instances of one model class (a model and its EMA copy) sees both buffers in turn.
        self._seen: dict[int, list[_Stamp]] = {i: [_Stamp(inputs[i])] for i in indices}
        self._rechecks = 0
        self._fallback: Callable[..., Any] | None = None

    def __call__(self, *args: Any) -> Any:
        if self._fallback is None and not self._holds(args):
            self._fallback = self._recompile()
        run = self._fallback if self._fallback is not None else self._compiled
        return run(*args)

    def _holds(self, inputs: Sequence[Any]) -> bool:
        changed = [
            i for i, stamps in self._seen.items() if not any(s.matches(inputs[i]) for s in stamps)
        ]
        if not changed:
            return True
        self._rechecks += 1
        valid = self._rechecks <= RECHECKS and all(self._still_valid(inputs[i]) for i in changed)
        if valid:
            for i in changed:
                self._seen[i] = [*self._seen[i], _Stamp(inputs[i])][-STAMPS:]
            return True
        why = (
            f"changed more than {RECHECKS} times"
            if self._rechecks > RECHECKS
            else "no longer hold the values relied on"
        )
        log.warning(
            "%s %s since the graph was compiled; compiling it without relying on "
            "them (once), and running that from now on",
            self._what, why,
        )  # fmt: skip
        return False


class _Stamp:
    """A tensor as it was when its values were checked: the object itself (held weakly: a new
    tensor at a freed one's address is not it), its version counter and its storage address."""

    def __init__(self, t: torch.Tensor) -> None:
        self._ref = weakref.ref(t)
        self._version = t._version
        self._ptr = t.data_ptr()

    def matches(self, t: Any) -> bool:
        same = self._ref() is t
        return same and bool(t._version == self._version and t.data_ptr() == self._ptr)
