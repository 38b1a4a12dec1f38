"""The typed result every profiling tool returns, and the bottleneck classes of stage 1.

Owns: `Bottleneck` (the roofline class), `Severity` and `Finding` (metric, value, threshold,
severity, plain-language guidance, suggested change in KernelSpec terms).
Must not: compute anything: tools fill findings in, proposers read them.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any


class Bottleneck(str, enum.Enum):
    MEMORY = "memory-bound"
    COMPUTE = "compute-bound"
    LATENCY = "latency-bound"  # too few waves, launch overhead, serial dependency
    UNDERUTILIZED = "under-utilised"  # far from both roofs without a latency cause


class Severity(str, enum.Enum):
    INFO = "info"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


@dataclasses.dataclass(frozen=True)
class Finding:
    """One observation about a candidate kernel.

    `suggestion` names knob changes in KernelSpec terms, e.g. {"num_stages": 3} or
    {"vector_width": 8}; empty when the tool has no concrete change to offer."""

    tool: str  # "roofline", "ncu", "sass", "ptxas", "timeline", "energy"
    metric: str  # e.g. "dram_throughput_pct"
    value: float | str
    threshold: float | str | None
    severity: Severity
    guidance: str  # one or two sentences a person (or an LLM) can act on
    suggestion: tuple[tuple[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["severity"] = self.severity.value
        d["suggestion"] = dict(self.suggestion)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        return cls(
            tool=d["tool"],
            metric=d["metric"],
            value=d["value"],
            threshold=d.get("threshold"),
            severity=Severity(d["severity"]),
            guidance=d["guidance"],
            suggestion=tuple(sorted(dict(d.get("suggestion") or {}).items())),
        )
