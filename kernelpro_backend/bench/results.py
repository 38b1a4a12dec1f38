"""The records a bench run produces and their JSON form (both ways).

Owns: `ModeResult` (one workload under one mode), `WorkloadResult` (all modes of a workload,
speedups, % of speed-of-light, whether a kernelpro mode ran its fallback's own code) and
`BenchReport` (the run: device, versions, the device's measured roofs, every workload,
geometric-mean speedups), and reading them back from JSON (`from_dict`: only the recorded
fields; speedups and % SOL are always recomputed).

A kernelpro mode that installed no kernel and made no torch-level rewrite ran its fallback's
own code (`same_code_as`): its time differs from the fallback's by noise alone (on a busy CPU,
a "1.05x vs inductor" geomean over workloads with 0 kernels). Its speedup over that fallback is
1 by construction, and is counted so in the geometric means.
Must not: run or time anything.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .modes import EAGER, INDUCTOR, INDUCTOR_GRAPHS, KERNELPRO, KERNELPRO_GRAPHS, LIKE_FOR_LIKE

OK, WRONG, FAILED, UNCHECKED = "ok", "wrong", "failed", "unchecked"

# The mode whose own code a kernelpro mode runs where it installs nothing, by its fallback.
FALLBACK_PEERS: dict[tuple[str, str], str] = {
    (KERNELPRO, "inductor"): INDUCTOR,
    (KERNELPRO, "eager"): EAGER,
    (KERNELPRO_GRAPHS, "inductor"): INDUCTOR_GRAPHS,
    (KERNELPRO_GRAPHS, "eager"): EAGER,
}


@dataclasses.dataclass
class ModeResult:
    mode: str
    status: str  # ok | wrong (differs from eager) | failed (raised) | unchecked (eager failed)
    median_ms: float | None = None
    compile_s: float | None = None  # first call: compile + warm-up, seconds
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    message: str = ""
    kernels: str = ""  # kernelpro: "used/found", its kernels in use of the subgraphs it cut
    rewrites: str = ""  # kernelpro: the torch-level rewrites made (bench/sessions.rewrites_made)
    fallback: str = ""  # kernelpro: the fallback its graphs compiled with (inductor | eager)
    # GPU memory one step allocates beyond what is resident before it (activations, logits,
    # gradients, workspaces; weights and optimizer state are the same in every mode): where a
    # fusion that never materialises a tensor shows. None off the GPU.
    step_peak_mib: float | None = None
    # Training steps on the GPU: wall time per step of steps run back to back with one
    # synchronize at the end (median over the rounds), the rate a training loop runs at — the
    # host's where issuing a step takes longer than the GPU runs it. `median_ms` (do_bench's
    # CUDA events, L2 flushed) is the GPU's rate while the host is ahead. None elsewhere.
    steady_ms: float | None = None
    # Each interleaved round's step time (median_ms is their median): every round times each
    # mode back to back, so round i of two modes is a paired comparison (speedup_range).
    round_ms: list[float] = dataclasses.field(default_factory=list)
    # Training steps on the GPU: ms the host takes to launch one step, and ms until that step
    # finished, each step started with the GPU idle (medians): launches that take most of the
    # step mean the host sets its time, and a GPU-side gain shows only in part.
    launch_ms: float | None = None
    launched_step_ms: float | None = None
    # On the GPU: joules per step (per call for inference) from NVML's energy counter, steps
    # run back to back (bench/timing.step_energy), and the board's idle draw read before them
    # (W; what a step's time costs even with nothing running). None where not measured.
    step_j: float | None = None
    idle_w: float | None = None
    # kernelpro: each compiled graph that got kernels, with its in-context verdict and each
    # kernel's isolated figures (bench/sessions.graph_verdicts): where a regret comes from
    graphs: list[dict[str, Any]] = dataclasses.field(default_factory=list)


def mode_from_dict(d: dict[str, Any]) -> ModeResult:
    """A ModeResult from its JSON (extra keys such as speedups ignored; errors written as the
    strings "inf"/"nan" by strict JSON read back as floats)."""
    fields = {f.name for f in dataclasses.fields(ModeResult)}
    values = {k: v for k, v in d.items() if k in fields}
    for key in ("max_abs_err", "max_rel_err"):
        if isinstance(values.get(key), str):
            values[key] = float(values[key])
    return ModeResult(**values)


@dataclasses.dataclass(frozen=True)
class SubgraphPoint:
    """One subgraph's place on the roofline (filled in by whoever has per-subgraph data)."""

    name: str
    flops: float
    bytes: float
    ms: float


@dataclasses.dataclass
class WorkloadResult:
    workload: str
    kind: str  # training | inference
    dtype: str
    size: str
    source: str
    modes: list[ModeResult]
    sol_ms: float | None = None
    subgraphs: list[SubgraphPoint] = dataclasses.field(default_factory=list)

    def mode(self, name: str) -> ModeResult | None:
        return next((m for m in self.modes if m.mode == name), None)

    def speedup(self, mode: str, over: str) -> float | None:
        """How many times faster `mode` is than `over` (None unless both ran and are right)."""
        a, b = self.mode(mode), self.mode(over)
        if a is None or b is None or a.status != OK or b.status != OK:
            return None
        if not a.median_ms or not b.median_ms:
            return None
        return b.median_ms / a.median_ms

    def same_code_as(self, mode: str) -> str | None:
        """The mode whose own code `mode` ran, where `mode` is a kernelpro mode that installed
        no kernel (none found, or every one dropped in context) and made no torch-level
        rewrite; else None (also where that is not recorded: results from before)."""
        m = self.mode(mode)
        if m is None or not m.kernels or not m.rewrites.startswith("none"):
            return None
        if m.kernels.split("/", 1)[0].strip() != "0":
            return None
        return FALLBACK_PEERS.get((mode, m.fallback))

    def counted_speedup(self, mode: str, over: str) -> float | None:
        """`speedup`, but 1 where `mode` ran `over`'s own code (`same_code_as`): what a
        geometric mean counts, so that noise between two runs of one code is no speedup."""
        measured = self.speedup(mode, over)
        return 1.0 if measured is not None and self.same_code_as(mode) == over else measured

    def steady_speedup(self, mode: str, over: str) -> float | None:
        """`speedup` from the back-to-back rates (`steady_ms`): what a training loop sees where
        the host sets the step's time, which the event-timed medians show only in part."""
        if self.speedup(mode, over) is None:
            return None
        a, b = self.mode(mode), self.mode(over)
        assert a is not None and b is not None
        return b.steady_ms / a.steady_ms if a.steady_ms and b.steady_ms else None

    def speedup_range(self, mode: str, over: str) -> tuple[float, float] | None:
        """The lowest and highest of the per-round speedups of `mode` over `over` (rounds are
        interleaved: round i timed both within moments of each other), or None. A mode whose
        highest is under 1 was slower in every round: slower beyond the run's noise."""
        if self.speedup(mode, over) is None:
            return None
        a, b = self.mode(mode), self.mode(over)
        assert a is not None and b is not None
        ratios = [y / x for x, y in zip(a.round_ms, b.round_ms, strict=False) if x > 0]
        return (min(ratios), max(ratios)) if ratios else None

    def sol_fraction(self, mode: str) -> float | None:
        m = self.mode(mode)
        if self.sol_ms is None or m is None or m.status != OK or not m.median_ms:
            return None
        return self.sol_ms / m.median_ms

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for entry in d["modes"]:
            name = entry["mode"]
            entry["speedup_vs_eager"] = self.speedup(name, EAGER)
            entry["speedup_vs_inductor"] = self.speedup(name, INDUCTOR)
            entry["speedup_vs_inductor_range"] = self.speedup_range(name, INDUCTOR)
            entry["steady_speedup_vs_inductor"] = self.steady_speedup(name, INDUCTOR)
            entry["sol_fraction"] = self.sol_fraction(name)
            entry["same_code_as"] = self.same_code_as(name)
            peer = LIKE_FOR_LIKE.get(name)
            if peer is not None and self.speedup(name, peer) is not None:
                entry["like_for_like"] = {
                    "over": peer,
                    "speedup": self.speedup(name, peer),
                    "range": self.speedup_range(name, peer),
                }
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WorkloadResult:
        return cls(
            workload=d["workload"],
            kind=d.get("kind", "?"),
            dtype=d.get("dtype", "?"),
            size=d.get("size", "?"),
            source=d.get("source", "?"),
            modes=[mode_from_dict(m) for m in d["modes"]],
            sol_ms=d.get("sol_ms"),
            subgraphs=[SubgraphPoint(**p) for p in d.get("subgraphs", [])],
        )


def geomean(values: list[float]) -> float | None:
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


@dataclasses.dataclass
class BenchReport:
    device: str
    device_name: str
    versions: dict[str, str]
    size: str
    modes: list[str]
    mode_descriptions: dict[str, str]
    workloads: list[WorkloadResult] = dataclasses.field(default_factory=list)
    # the device's measured ceilings, for the roofline chart: dram_tb_per_s, fp32_tflops,
    # tf32_tflops, bf16_tflops (empty on the CPU, which has no measured roofs)
    roofs: dict[str, float] = dataclasses.field(default_factory=dict)
    # the GPU's power limit as NVML reports it (profilers/energy.PowerCap.to_dict: enforced_w,
    # default_w, capped, note); empty where it cannot be read
    power: dict[str, Any] = dataclasses.field(default_factory=dict)

    def geomean_speedup(self, mode: str, over: str) -> float | None:
        """Geometric mean over the workloads where both modes ran and matched eager; a workload
        where `mode` ran `over`'s own code counts 1 (`WorkloadResult.counted_speedup`)."""
        values = [w.counted_speedup(mode, over) for w in self.workloads]
        return geomean([v for v in values if v is not None])

    def same_code(self, mode: str) -> tuple[list[str], str | None]:
        """(the workloads where `mode` ran its fallback's own code, that fallback's mode)."""
        peers = {w.workload: w.same_code_as(mode) for w in self.workloads}
        names = [name for name, peer in peers.items() if peer is not None]
        return names, next((peers[n] for n in names), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "device_name": self.device_name,
            "versions": self.versions,
            "size": self.size,
            "modes": self.modes,
            "mode_descriptions": self.mode_descriptions,
            "roofs": self.roofs,
            "power": self.power,
            "workloads": [w.to_dict() for w in self.workloads],
            "geomean_speedup_vs_eager": {m: self.geomean_speedup(m, EAGER) for m in self.modes},
            "geomean_speedup_vs_inductor": {
                m: self.geomean_speedup(m, INDUCTOR) for m in self.modes
            },
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BenchReport:
        """A report read back from `to_dict`'s JSON (a file written by `kernelpro bench --json`
        or scripts/gpu_bench.py)."""
        return cls(
            device=d["device"],
            device_name=d["device_name"],
            versions=dict(d.get("versions", {})),
            size=d.get("size", "?"),
            modes=list(d["modes"]),
            mode_descriptions=dict(d.get("mode_descriptions", {})),
            workloads=[WorkloadResult.from_dict(w) for w in d["workloads"]],
            roofs=dict(d.get("roofs") or {}),
            power=dict(d.get("power") or {}),
        )


def per_problem(report: BenchReport) -> dict[str, dict[str, Any]]:
    """{workload: {"eager_ms", "inductor_ms", "kernelpro_ms", "ok", "kernels"}}: one line of
    a run per problem, the form KernelBench runs are committed in (docs/gpu_runs/)."""
    out: dict[str, dict[str, Any]] = {}
    for w in report.workloads:
        ms = {m.mode: m for m in w.modes}
        kernelpro = ms.get("kernelpro")
        row: dict[str, Any] = {
            f"{mode}_ms": ms[mode].median_ms if mode in ms else None
            for mode in ("eager", "inductor", "kernelpro")
        }
        row["ok"] = all(m.status == "ok" for m in w.modes)
        row["kernels"] = kernelpro.kernels if kernelpro is not None else ""
        out[w.workload] = row
    return out
