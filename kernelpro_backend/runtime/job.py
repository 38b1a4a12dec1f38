"""One evaluation request: a candidate plus everything a worker needs to judge it.

Owns: `Job`, made in the parent from a `Subgraph` (the reference module is pickled here, in
the trusted process that built it) and sent to a worker as plain data.
Must not: run anything.
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

from ..profilers.ceilings import Ceilings
from ..profilers.speed_of_light import SpeedOfLight, Work
from .candidate import BASELINES, BaselineCandidate, Candidate, as_candidate
from .fallback import FallbackSettings
from .feedback import FeedbackPlan

TensorMeta = tuple[tuple[int, ...], tuple[int, ...], str]


@dataclasses.dataclass(frozen=True)
class Job:
    reference: bytes  # pickled fx.GraphModule: forward(*inputs) -> tuple(outputs)
    candidate: Candidate
    input_meta: tuple[TensorMeta, ...]
    output_meta: tuple[TensorMeta, ...]
    int_ranges: tuple[tuple[int, int, int], ...] = ()  # (input index, low, high)
    precision: str = "ieee"  # float32 matmul policy: ieee | tf32 | tf32x3
    # How the fallback runs the subgraph in the user's graph (its Inductor options and layout,
    # the cuDNN flags): baselines are compiled and timed so (fallback.py)
    fallback: FallbackSettings = FallbackSettings()
    device: str = "cpu"
    trials: int = 3  # fresh random input sets the candidate must match the reference on
    seed: int = 0
    measure_energy: bool = False
    work: Work | None = None  # FLOPs and bytes, for the speed-of-light bound
    sol_ms: float | None = None  # set in the parent when ceilings were given; else the worker's
    timing_budget_s: float = 0.25  # time spent in timed runs (after warm-up), per candidate
    timing_settle: bool = False  # stop the timed runs once their median is settled (timing.py)
    timing_heat_s: float = 0.0  # untimed runs for this long before the timed ones (timing.py)
    name: str = ""  # for messages and logs: pattern and key digest
    feedback: FeedbackPlan | None = None  # stage-2 profiling of an OK candidate (not baselines)
    # A search's best time so far times a margin: a candidate whose first runs are slower than
    # this is timed no further and not proved (it cannot win); None: always time and prove.
    abandon_above_ms: float | None = None
    # False where the float64 reference does not fit the GPU (runtime/memory.py): proved
    # against the reference module's result in the subgraph's own dtypes
    exact_reference: bool = True

    def __post_init__(self) -> None:
        if self.trials < 3:
            raise ValueError(f"a candidate is proved on >= 3 input sets, got trials={self.trials}")

    @classmethod
    def from_subgraph(
        cls,
        subgraph: Any,
        candidate: object,
        *,
        trials: int = 3,
        seed: int = 0,
        measure_energy: bool = False,
        ceilings: Ceilings | None = None,
        feedback: FeedbackPlan | None = None,
    ) -> Job:
        """A job for `candidate` (a Candidate or a codegen KernelSpec) on `subgraph`."""
        work = SpeedOfLight.work(subgraph)
        sol_ms = SpeedOfLight.time_ms(work, ceilings, subgraph.precision) if ceilings else None
        try:
            name = f"{subgraph.pattern}-{subgraph.key.short()}"
        except (ValueError, AttributeError):
            name = str(subgraph.pattern)
        return cls(
            reference=pickle.dumps(subgraph.module()),
            candidate=as_candidate(candidate),
            input_meta=tuple(subgraph.input_meta),
            output_meta=tuple(subgraph.output_meta),
            int_ranges=tuple(sorted((i, r.low, r.high) for i, r in subgraph.int_ranges.items())),
            precision=subgraph.precision,
            fallback=FallbackSettings.of(subgraph),
            device=str(subgraph.device),
            trials=trials,
            seed=seed,
            measure_energy=measure_energy,
            work=work,
            sol_ms=sol_ms,
            name=name,
            feedback=feedback,
        )

    def for_fallback(self, fallback: str) -> Job:
        """This job as a graph with `fallback` ("inductor" | "eager") runs it: an eager graph
        has no Inductor layout, so neither its baseline nor a kernel meets one."""
        if fallback == "inductor":
            return self
        plain = dataclasses.replace(self.fallback, graph_input_meta=None, graph_output_meta=None)
        return dataclasses.replace(self, fallback=plain)

    def with_candidate(self, candidate: object) -> Job:
        return dataclasses.replace(self, candidate=as_candidate(candidate))

    def baselines(self) -> list[Job]:
        """The eager and Inductor jobs for the same subgraph, timed the same way; Inductor's
        inputs laid as it lays them in the graph (eager's, behind kernelpro::launch, are not)."""
        eager, inductor = (self.with_candidate(BaselineCandidate(n)) for n in BASELINES)
        laid = self.fallback.graph_input_meta
        return [eager, inductor if laid is None else dataclasses.replace(inductor, input_meta=laid)]
