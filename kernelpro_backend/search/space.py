"""What the search needs to know about candidates, and the adapter to the real codegen.

Owns: the `SearchSpace` protocol (seed candidates, legal knob values, knob roles, one knob
change, a JSON summary), the role vocabulary `ROLE_NAMES`, `codegen_space()` which adapts
`kernelpro_backend.codegen` and `.lowering` lazily, and the naming of a knob change as a move
("vector_width:up", "persistent=True") that search memory can generalise.
Must not: measure candidates or read findings (proposers do).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import types
from collections.abc import Callable, Hashable
from typing import Any, Protocol

KnobValue = Any  # int | str | bool; Any because codegen owns the exact types
# What a knob does (codegen.knobs.KnobRole's values; the search does not import codegen).
ROLE_NAMES = (
    "tile", "vector", "rows", "passes", "persistent", "split", "programs", "warps", "stages",
    "precision", "subtile", "other",
)  # fmt: skip


class SearchSpace(Protocol):
    """The candidates of one code generator, seen from the search.

    Candidates are frozen and hashable (the tree deduplicates them by equality)."""

    #: the exception (or tuple of them) `with_knobs` raises for an illegal combination
    illegal: type[BaseException] | tuple[type[BaseException], ...]

    def initial(self, subgraph: Any) -> list[Hashable]:
        """Seed candidates for the subgraph (empty when the generator does not support it)."""
        ...

    def knob_space(self, candidate: Hashable) -> dict[str, tuple[KnobValue, ...]]:
        """Legal values per knob, in increasing order for numbers; {} for free-form candidates."""
        ...

    def knobs(self, candidate: Hashable) -> dict[str, KnobValue]:
        """The candidate's current knob values; {} for free-form candidates."""
        ...

    def knob_roles(self, candidate: Hashable) -> dict[str, str]:
        """Each knob's role, one of `ROLE_NAMES` (codegen's `KnobRole` values): the rules move
        knobs by role, never by name; {} for free-form candidates."""
        ...

    def with_knobs(self, candidate: Hashable, **changes: KnobValue) -> Hashable:
        """The candidate with some knobs changed; raises `illegal` if the result is illegal."""
        ...

    def describe(self, candidate: Hashable) -> dict[str, Any]:
        """A JSON-serialisable summary for logs and serialized trees."""
        ...


def move_name(before: dict[str, KnobValue], after: dict[str, KnobValue]) -> str:
    """Name the knob changes from `before` to `after` independently of the subgraph, so that a
    move that helped one softmax can be tried first on the next: numbers go "up"/"down",
    strings and booleans name their new value. Several changes are joined with "+"."""
    parts = []
    for name in sorted(set(before) | set(after)):
        old: Any = before.get(name)
        new: Any = after.get(name)
        if old == new:
            continue
        if _numeric(old) and _numeric(new):
            parts.append(f"{name}:{'up' if new > old else 'down'}")
        else:
            parts.append(f"{name}={new}")
    return "+".join(parts) if parts else "same"


def _numeric(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# Siblings of the seed at the root (one knob moved each), tried as the root widens.
SEED_VARIANTS = 4


@dataclasses.dataclass(frozen=True)
class CodegenSpace:
    """`SearchSpace` over `kernelpro_backend.codegen.KernelSpec` (and free-form
    `SourceCandidate`s, which have no knobs). Built by `codegen_space()`."""

    # the codegen contract: KernelSpec, IllegalSpec, Unsupported, knob_space, knob_roles
    # (codegen/) and lower (lowering/)
    codegen: Any
    illegal: Any
    # Whether a spec can be measured now (a CUTLASS GEMM: once its library is built,
    # tuner/cutlass_builds.py); None: every legal spec can.
    ready: Callable[[Any], bool] | None = None

    def _ready(self, candidate: Any) -> bool:
        return self.ready is None or self.ready(candidate)

    def initial(self, subgraph: Any) -> list[Hashable]:
        """The lowered seed first, then up to SEED_VARIANTS siblings that each move one knob to
        a neighbouring legal value: a seed that fails (a wrong reduction order, too many
        registers) no longer ends the search with nothing left to expand."""
        try:
            seed = self.codegen.lower(subgraph)
        except self.codegen.Unsupported:
            return []
        # Then the same program in the other templates that can run it (a long row kept on
        # chip by a CUDA cluster kernel beside the Triton seed), each measured like the seed.
        alternatives = [a for a in self.codegen.alternatives(seed) if self._ready(a)]
        hinted = self._hinted(subgraph, [seed, *alternatives])
        if getattr(subgraph, "hints_only", False):
            return hinted  # a neighbouring size's winner proved at this size, nothing else
        out: list[Hashable] = [seed, *hinted, *alternatives]
        knobs = dict(getattr(seed, "knobs", ()))
        for name, values in sorted(self.codegen.knob_space(seed).items()):
            if len(out) > SEED_VARIANTS or name not in knobs or knobs[name] not in values:
                continue
            i = values.index(knobs[name])
            for j in (i + 1, i - 1):
                if 0 <= j < len(values):
                    try:
                        out.append(seed.with_knobs(**{name: values[j]}))
                    except self.illegal:
                        continue
                    break
        # Then other configurations of the seed's template (a GEMM: a few of Inductor's tiles),
        # after the siblings: a config the seed's neighbourhood would take many moves to reach
        out += [c for c in self.codegen.seed_configs(seed) if c not in out]
        return out

    def _hinted(self, subgraph: Any, bases: list[Any]) -> list[Hashable]:
        """The configurations that won at other sizes of the same symbolic subgraph
        (`subgraph.hints`: template and knobs), applied to this size's seed or alternative of
        that template; those illegal at this size are left out."""
        out: list[Hashable] = []
        for template, knobs in getattr(subgraph, "hints", ()):
            base = next((b for b in bases if getattr(b, "template", None) == template), None)
            if base is None:
                continue
            try:
                candidate = base.with_knobs(**dict(knobs))
            except self.illegal:
                continue
            if candidate not in out and candidate not in bases:
                out.append(candidate)
        return out

    def _is_spec(self, candidate: Any) -> bool:
        return isinstance(candidate, self.codegen.KernelSpec)

    def knob_space(self, candidate: Hashable) -> dict[str, tuple[KnobValue, ...]]:
        if not self._is_spec(candidate):
            return {}
        return dict(self.codegen.knob_space(candidate))

    def knobs(self, candidate: Hashable) -> dict[str, KnobValue]:
        return dict(getattr(candidate, "knobs", ())) if self._is_spec(candidate) else {}

    def knob_roles(self, candidate: Hashable) -> dict[str, str]:
        if not self._is_spec(candidate):
            return {}
        return {k: str(r.value) for k, r in self.codegen.knob_roles(candidate).items()}

    def with_knobs(self, candidate: Hashable, **changes: KnobValue) -> Hashable:
        if not self._is_spec(candidate):
            raise self.illegal(f"{type(candidate).__name__} has no knobs to change")
        result: Hashable = candidate.with_knobs(**changes)  # type: ignore[attr-defined]
        if not self._ready(result):
            knobs = dict(getattr(result, "knobs", ()))
            raise self.illegal(f"the library of {knobs} is not built yet")
        return result

    def surcharge_ms(self, candidate: Hashable, gpu_ms: float) -> float:
        """What `candidate` must save beyond the launch path's minimum gain (a slower host
        path than a Triton launch's: codegen's `host_surcharge_ms`)."""
        if not self._is_spec(candidate):
            return 0.0
        return float(self.codegen.host_surcharge_ms(candidate, gpu_ms))

    def describe(self, candidate: Hashable) -> dict[str, Any]:
        if self._is_spec(candidate):
            spec: Any = candidate
            out = {"template": spec.template, "knobs": dict(spec.knobs), "digest": spec.digest}
            note = getattr(self.codegen, "note", None)  # what the knobs do not show (padding)
            if note is not None and note(spec):
                out["note"] = note(spec)
            return out
        source = getattr(candidate, "source", "")
        return {
            "language": getattr(candidate, "language", type(candidate).__name__),
            "entry": getattr(candidate, "entry", ""),
            "source_sha256": hashlib.sha256(str(source).encode()).hexdigest()[:16],
        }


def codegen_space(ready: Callable[[Any], bool] | None = None) -> CodegenSpace:
    """The search space of the real code generator (`ready`: CodegenSpace.ready). Imported
    here, not at module import, so the search works (and is tested) without codegen."""
    codegen = importlib.import_module("kernelpro_backend.codegen")
    lowering = importlib.import_module("kernelpro_backend.lowering")
    contract = types.SimpleNamespace(
        KernelSpec=codegen.KernelSpec,
        IllegalSpec=codegen.IllegalSpec,
        Unsupported=codegen.Unsupported,
        knob_space=codegen.knob_space,
        knob_roles=codegen.knob_roles,
        lower=lowering.lower,
        alternatives=codegen.alternatives,
        seed_configs=codegen.seed_configs,
        host_surcharge_ms=codegen.host_surcharge_ms,
        note=codegen.spec_note,
    )
    return CodegenSpace(codegen=contract, illegal=codegen.IllegalSpec, ready=ready)
