"""A compiled graph that relied on the values of some of its inputs (a buffer holding a causal
mask, fx_passes/causal_mask.py; a mask an earlier graph proved constant,
fx_passes/mask_provenance.py), called only while those values hold; and a compiled graph that
registers the constant masks it outputs.

Dynamo guards a graph on its inputs' shapes, dtypes and strides, not on a buffer's values. Each
call here checks, on the host, each relied-on input's version counter (every in-place write
bumps it: `copy_`, `load_state_dict`, a DDP broadcast) and storage address (`.to()` or `.data
=` move it): a few µs. When one moved, the values are checked again (one device-to-host read):
still causal, the graph goes on, and the last `STAMPS` checked states of each input are
remembered (two model instances sharing the graph alternate without re-checks); not, or changed
more than `RECHECKS` times (a buffer rewritten every step would pay a read every call), the
graph compiled without relying on any value runs from then on, compiled on first need, with a
log line saying why.

A mask proved constant by the graph that made it (`proven`) is checked on every call instead,
with no device read: the tensor passed must be a registered proven mask of the kind relied on,
unwritten since it was registered (mask_provenance.py: a dictionary lookup and a few attribute
reads). A new mask arrives each step (the earlier graph makes it again), so the check is per
call: a call whose mask is not proven runs the fallback graph (compiled on first need, a log
line the first time), the next call with a proven one the graph that relies on it.

Owns: `ValueGuarded(compiled, inputs, indices, still_valid, recompile, what, proven)`,
`registering(compiled, outputs)` (a compiled graph that registers its proven-constant outputs).
Must not: decide which values a graph relies on (the rewrites do) or compile (backend.py does).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ..fx_passes.mask_provenance import ProvenMask, proven, register

log = logging.getLogger("kernelpro")

RECHECKS = 3
STAMPS = 4  # checked stamps kept per input


class ValueGuarded:
    """Calls `compiled` while each input at `indices` holds a value for which
    `still_valid(tensor)` is true and each input at a key of `proven` is a mask proved to be
    what it maps to, else the graph `recompile()` makes. Called as Dynamo calls a backend's
    result: one positional argument per graph input."""

    def __init__(
        self,
        compiled: Callable[..., Any],
        inputs: Sequence[Any],
        indices: Sequence[int],
        still_valid: Callable[[torch.Tensor], bool],
        recompile: Callable[[], Callable[..., Any]],
        what: str,
        proven: Mapping[int, tuple[ProvenMask, str]] | None = None,
    ) -> None:
        self._compiled = compiled
        self._still_valid = still_valid
        self._recompile = recompile
        self._what = what
        # Per input, the stamps whose values were checked: a graph Dynamo shares between two
        # instances of one model class (a model and its EMA copy) sees both buffers in turn.
        self._seen: dict[int, list[_Stamp]] = {i: [_Stamp(inputs[i])] for i in indices}
        self._rechecks = 0
        self._stale = False  # the inputs at `indices` no longer hold: the fallback from now on
        self._proven = dict(proven or {})  # input -> (the mask relied on, its name)
        self._unproven_calls = 0
        self._fallback: Callable[..., Any] | None = None

    def __call__(self, *args: Any) -> Any:
        if self._relied_on_holds(args):
            return self._compiled(*args)
        if self._fallback is None:
            self._fallback = self._recompile()
        return self._fallback(*args)

    def _relied_on_holds(self, args: Sequence[Any]) -> bool:
        if self._stale or not self._proven_hold(args):
            return False
        self._stale = not self._holds(args)
        return not self._stale

    def _proven_hold(self, inputs: Sequence[Any]) -> bool:
        """Each input relied on as a proven mask is one, unwritten since (every call)."""
        failed = [name for i, (fact, name) in self._proven.items() if proven(inputs[i]) != fact]
        if not failed:
            return True
        self._unproven_calls += 1
        log.log(
            logging.WARNING if self._unproven_calls == 1 else logging.DEBUG,
            "the mask input(s) %s are not, on this call, the unmodified output of the earlier "
            "graph that proved them constant (written in place, a view or a copy, or made "
            "elsewhere): this call runs the graph compiled without relying on them (%d so far)",
            ", ".join(failed), self._unproven_calls,
        )  # fmt: skip
        return False

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


def registering(
    compiled: Callable[..., Any], outputs: Mapping[int, ProvenMask]
) -> Callable[..., Any]:
    """`compiled`, registering after each call its outputs at the positions of `outputs` as the
    proven masks they map to (what a later graph may rely on); `compiled` itself when none."""
    if not outputs:
        return compiled

    def run(*args: Any) -> Any:
        out = compiled(*args)
        if isinstance(out, (tuple, list)):
            for i, fact in outputs.items():
                register(out[i], fact)
        return out

    return run


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
