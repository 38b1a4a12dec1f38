"""A synthetic search space and a fake measurer over landscapes (functions of the knobs giving a
time, or an EvalStatus for failing regions): the search is tested on the CPU without codegen or
a GPU, as TVM MetaSchedule tests its strategies with fake runner results."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

from kernelpro_backend.profilers.findings import Finding
from kernelpro_backend.runtime.result import EvalResult, EvalStatus


class SyntheticIllegal(ValueError):
    pass


# The roles of the synthetic spaces' knob names (names of codegen templates and older specs;
# the real codegen declares its knobs' roles in codegen/knobs.py).
ROLE_OF: dict[str, str] = {
    **dict.fromkeys(("vector_width", "vec", "vector"), "vector"),
    **dict.fromkeys(("rows_per_program", "rows"), "rows"),
    **dict.fromkeys(("num_passes", "passes"), "passes"),
    "persistent": "persistent",
    **dict.fromkeys(("split_k", "split"), "split"),
    **dict.fromkeys(("block_m", "block_n", "block_k", "block_c", "block_size", "block"), "tile"),
    **dict.fromkeys(("num_warps", "warps"), "warps"),
    **dict.fromkeys(("num_stages", "stages"), "stages"),
    "precision": "precision",
    "epilogue_subtile": "subtile",
}


def knob_roles(names: Sequence[str]) -> dict[str, str]:
    """Each knob's role by its name, "other" for names no rule moves."""
    return {name: ROLE_OF.get(name.lower(), "other") for name in names}


@dataclasses.dataclass(frozen=True)
class Spec:
    template: str
    knobs: tuple[tuple[str, Any], ...]


@dataclasses.dataclass(frozen=True)
class FakeKey:
    digest: str


@dataclasses.dataclass(frozen=True)
class FakeSubgraph:
    kind: str = "reduction"
    pattern: str = "softmax"
    precision: str = "ieee"
    key: FakeKey = FakeKey("f" * 64)


class SyntheticSpace:
    illegal = SyntheticIllegal

    def __init__(
        self,
        values: dict[str, tuple[Any, ...]],
        seeds: Sequence[dict[str, Any]],
        legal: Callable[[dict[str, Any]], bool] = lambda k: True,
    ) -> None:
        self.values, self.seeds, self.legal = values, list(seeds), legal

    def spec(self, **knobs: Any) -> Spec:
        return Spec("synthetic", tuple(sorted(knobs.items())))

    def initial(self, subgraph: Any) -> list[Spec]:
        return [self.spec(**s) for s in self.seeds]

    def knob_space(self, c: Spec) -> dict[str, tuple[Any, ...]]:
        return dict(self.values)

    def knobs(self, c: Spec) -> dict[str, Any]:
        return dict(c.knobs)

    def knob_roles(self, c: Spec) -> dict[str, str]:
        return knob_roles(list(self.values))

    def with_knobs(self, c: Spec, **changes: Any) -> Spec:
        for name, value in changes.items():
            if name not in self.values or value not in self.values[name]:
                raise SyntheticIllegal(f"{name}={value!r} is not a legal value")
        knobs = {**dict(c.knobs), **changes}
        if not self.legal(knobs):
            raise SyntheticIllegal(f"illegal combination {knobs}")
        return self.spec(**knobs)

    def describe(self, c: Spec) -> dict[str, Any]:
        return {"template": c.template, "knobs": dict(c.knobs)}


Landscape = Callable[[dict[str, Any]], "float | EvalStatus"]


class SyntheticMeasurer:
    """Times from a landscape; spread, SOL, energy and findings from optional functions."""

    def __init__(
        self,
        landscape: Landscape,
        *,
        baselines: dict[str, float] | None = None,
        spread: float = 0.005,
        sol_ms: float | None = None,
        energy: Callable[[dict[str, Any]], float] | None = None,
        findings: Callable[[dict[str, Any]], tuple[Finding, ...]] | None = None,
        clock: list[float] | None = None,
        seconds_per_trial: float = 0.0,
    ) -> None:
        self.landscape = landscape
        self.baseline_ms = baselines if baselines is not None else {"eager": 3.0, "inductor": 2.0}
        self.spread, self.sol_ms = spread, sol_ms
        self.energy, self.findings = energy, findings
        self.clock, self.seconds_per_trial = clock, seconds_per_trial
        self.measured: list[dict[str, Any]] = []

    def _ok(self, ms: float, knobs: dict[str, Any] | None) -> EvalResult:
        return EvalResult(
            EvalStatus.OK,
            median_ms=ms,
            spread_ms=self.spread,
            times_ms=(ms,),
            sol_ms=self.sol_ms,
            sol_fraction=None if self.sol_ms is None else min(1.0, self.sol_ms / ms),
            energy_j=None if self.energy is None or knobs is None else self.energy(knobs),
            findings=() if self.findings is None or knobs is None else self.findings(knobs),
        )

    def baselines(self, subgraph: Any) -> dict[str, EvalResult]:
        return {name: self._ok(ms, None) for name, ms in self.baseline_ms.items()}

    def measure(self, subgraph: Any, candidates: Sequence[Spec]) -> list[EvalResult]:
        out = []
        for c in candidates:
            knobs = dict(c.knobs)
            self.measured.append(knobs)
            if self.clock is not None:
                self.clock[0] += self.seconds_per_trial
            value = self.landscape(knobs)
            if isinstance(value, EvalStatus):
                out.append(EvalResult(value, message=f"synthetic failure at {knobs}"))
            else:
                out.append(self._ok(float(value), knobs))
        return out


# ---- landscapes ------------------------------------------------------------------------------

BOWL_VALUES: dict[str, tuple[Any, ...]] = {
    "block": (16, 32, 64, 128, 256),
    "num_warps": (1, 2, 4, 8, 16),
    "vector_width": (1, 2, 4, 8),
    "persistent": (False, True),
}
BOWL_SEED = {"block": 16, "num_warps": 1, "vector_width": 1, "persistent": False}
BOWL_OPTIMUM = {"block": 64, "num_warps": 4, "vector_width": 8, "persistent": True}
BOWL_BEST_MS = 0.9


def bowl(k: dict[str, Any]) -> float | EvalStatus:
    """A separable bowl with its optimum (0.9 ms) at BOWL_OPTIMUM, 3.9 ms at the seed, and two
    failing regions: 16 warps never compile, block 256 with >= 8 warps crashes."""
    if k["num_warps"] == 16:
        return EvalStatus.COMPILE_ERROR
    if k["block"] == 256 and k["num_warps"] >= 8:
        return EvalStatus.CRASHED
    t = 1.0 + 0.3 * abs(math.log2(k["block"]) - 6)
    t *= 1.0 + 0.2 * abs(math.log2(k["num_warps"]) - 2)
    t *= 1.0 + 0.25 * abs(math.log2(k["vector_width"]) - 3)
    return t * (0.9 if k["persistent"] else 1.0)


def bowl_search_parts(**measurer_kw: Any) -> tuple[SyntheticSpace, SyntheticMeasurer]:
    return SyntheticSpace(BOWL_VALUES, [BOWL_SEED]), SyntheticMeasurer(bowl, **measurer_kw)
