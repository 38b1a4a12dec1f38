"""`KernelSpec`: the data that describes one kernel, from which its source is rendered.

Owns: the frozen, hashable, JSON-serialisable spec (template, sorted knobs, precision and a
self-contained program: input/output tensor metas, the domain the kernel iterates, loads with
their index expressions, the op list, stores, and the template's anchor parameters), and
`RenderedKernel`. No fx objects: the cache rebuilds a kernel from `to_json()` alone.
Must not: render, compile or measure. knobs.py, which validates a spec, reads it through
`spec_view.SpecView` and does not import this module.

Program references: ("L", i) is load i, ("T", i) is op i's result, ("A", 0) the GEMM or
attention accumulator tile, ("c", value) a constant.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from .errors import IllegalSpec
from .index import to_tuple
from .knobs import validate, with_added_knobs
from .spec_view import KnobValue, TensorMeta

__all__ = ["KernelSpec", "KnobValue", "RenderedKernel", "TensorMeta"]

TEMPLATES = (
    "pointwise", "row_reduction", "row_cluster", "row_split", "gemm", "gemm_library",
    "gemm_padded", "gemm_cutlass", "attention", "attention_backward", "conv", "conv_depthwise",
    "conv_backward", "conv_depthwise_backward", "conv_cutlass",
)  # fmt: skip
CUDA_TEMPLATES = ("row_cluster",)  # rendered as CUDA C++, the others as Triton
PRECISIONS = ("ieee", "tf32", "tf32x3")


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    template: str
    knobs: tuple[tuple[str, KnobValue], ...]
    precision: str
    inputs: tuple[TensorMeta, ...]
    outputs: tuple[TensorMeta, ...]
    domain: tuple[int, ...] = ()
    reduced: tuple[int, ...] = ()  # domain dims a program reduces over (its "columns")
    loads: tuple[tuple[int, int, Any], ...] = ()  # (input index, storage offset, Index)
    ops: tuple[tuple[str, tuple[Any, ...], str], ...] = ()  # (op, args, result dtype)
    stores: tuple[tuple[Any, int, Any, Any], ...] = ()  # (ref, offset, Index, predicate)
    anchor: tuple[tuple[str, Any], ...] = ()  # template parameters (GEMM operands, causal, ...)
    pattern: str = ""

    def __post_init__(self) -> None:
        if self.template not in TEMPLATES:
            raise ValueError(f"unknown template {self.template!r}; known: {TEMPLATES}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r}; known: {PRECISIONS}")
        if list(self.knobs) != sorted(self.knobs, key=lambda kv: kv[0]):
            raise ValueError("knobs must be sorted by name (use with_knobs)")
        validate(self)

    def knob(self, name: str) -> KnobValue:
        for k, v in self.knobs:
            if k == name:
                return v
        raise KeyError(f"{self.template} spec has no knob {name!r}; it has {dict(self.knobs)}")

    def param(self, name: str) -> Any:
        return dict(self.anchor)[name]

    def with_knobs(self, **changes: KnobValue) -> KernelSpec:
        """A copy with some knobs changed; raises IllegalSpec for illegal values."""
        current = dict(self.knobs)
        unknown = set(changes) - set(current)
        if unknown:
            raise IllegalSpec(
                f"knobs {sorted(unknown)} do not exist for template {self.template!r}; "
                f"use one of {sorted(current)}"
            )
        current.update(changes)
        return dataclasses.replace(self, knobs=tuple(sorted(current.items())))

    def with_precision(self, precision: str) -> KernelSpec:
        return dataclasses.replace(self, precision=precision)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> KernelSpec:
        raw = json.loads(text)
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = set(raw) - fields
        if unknown:
            raise ValueError(
                f"spec JSON has unknown fields {sorted(unknown)}: written by a newer kernelpro?"
            )
        values: dict[str, Any] = {
            k: (v if isinstance(v, str) else to_tuple(v)) for k, v in raw.items()
        }
        values["knobs"] = with_added_knobs(values["template"], values.get("knobs", ()))
        return cls(**values)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    def summary(self) -> dict[str, Any]:
        """Short form for logs: template, pattern, knobs, precision."""
        return {
            "template": self.template,
            "pattern": self.pattern,
            "knobs": dict(self.knobs),
            "precision": self.precision,
            "digest": self.digest[:12],
        }


@dataclasses.dataclass(frozen=True)
class RenderedKernel:
    language: str  # "triton", or "cuda" (a kernelpro-launch source: runtime/cuda/source.py)
    source: str  # a Python module defining `entry(*inputs) -> list[Tensor]`
    entry: str
