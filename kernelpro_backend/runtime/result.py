"""The typed outcome of evaluating one candidate: what the worker reports and the search reads.

Owns: `EvalStatus` and `EvalResult`. Expected failures (does not compile, wrong, crashed, hung,
suspiciously fast) are values here, not exceptions.
Must not: measure anything.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any

from ..profilers.findings import Finding


class EvalStatus(str, enum.Enum):
    OK = "ok"
    COMPILE_ERROR = "compile_error"
    WRONG = "wrong"  # differs from the reference (details say which output, max error, where)
    CRASHED = "crashed"  # illegal address, segfault: the worker died
    TIMED_OUT = "timed_out"  # hang: the worker was killed
    SUSPICIOUS = "suspicious"  # faster than speed of light, aliasing, input modified, ...


@dataclasses.dataclass(frozen=True)
class EvalResult:
    status: EvalStatus
    median_ms: float | None = None  # None unless status is OK
    spread_ms: float | None = None  # e.g. (p80 - p20) / 2 of the timed runs: ties lie inside it
    times_ms: tuple[float, ...] = ()
    sol_ms: float | None = None  # speed-of-light time of the subgraph on this device
    sol_fraction: float | None = None  # sol_ms / median_ms, in (0, 1]
    energy_j: float | None = None  # joules per call, when measured
    message: str = ""  # one line: why it failed, or what was measured
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    findings: tuple[Finding, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status is EvalStatus.OK

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["status"] = self.status.value
        d["findings"] = [f.to_dict() for f in self.findings]
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, default=str)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvalResult:
        return cls(
            status=EvalStatus(d["status"]),
            median_ms=d.get("median_ms"),
            spread_ms=d.get("spread_ms"),
            times_ms=tuple(d.get("times_ms") or ()),
            sol_ms=d.get("sol_ms"),
            sol_fraction=d.get("sol_fraction"),
            energy_j=d.get("energy_j"),
            message=d.get("message", ""),
            details=dict(d.get("details") or {}),
            findings=tuple(Finding.from_dict(f) for f in d.get("findings") or ()),
        )
