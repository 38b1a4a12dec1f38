"""The order a warm-up searches a whole step's subgraphs in, and how long each search may take.

A step's subgraphs are known before anything is searched (warmup/offline.py collects them, the
forward and the backward). Identical ones (one cache key: the 24 layers of a decoder) are one
search that serves every occurrence. Each distinct key's *possible gain* is estimated from its
shapes alone, with the roofline the search already uses (profilers/speed_of_light.py):

    gain a step = occurrences x (the fallback's estimated time - the speed-of-light bound
                                 / the share of it kernelpro's kernels reach, KERNELS_ATTAIN)

The bound includes the copies the graph makes around any kernel that replaces the subgraph
(an NHWC activation of a channels-last graph copied to the aten strides, runtime/relayout.py):
no kernel escapes them, so a subgraph they eat the gain of is not worth its search.

The fallback's estimate (at least its library calls' measured time where the warm-up could
time them, profilers/anchors.py): what the fallback must move — the subgraph's inputs and outputs, plus
the round trip to DRAM of every GEMM, convolution or attention output that an epilogue inside
the subgraph reads again (Inductor launches cuBLAS/cuDNN/flash attention as extern kernels
and fuses the pointwise and reduction work around them into kernels of its own; it fuses
pointwise chains and norms into one kernel, so those move no more than the bound) — at
FALLBACK_ATTAINS of the device's measured roofs. A key whose gain a call is under the launch
path's minimum gain (Options.min_gain_ms, what the finder asks of a kernel before it replaces
the fallback) is not planned: by the estimate its search cannot find a kernel that is used.

Blind spots (say so where the plan is shown): the fallback's real efficiency varies (launch-
bound small kernels; library calls far under their roofs, unless measured) and the search can
beat the estimate; what the split costs Inductor's fusions
around the subgraph is not counted (the in-context check measures it).

Owns: `Estimate`, `KERNELS_ATTAIN`, `PlanItem`, `SearchPlan`, `plan_searches`,
`search_budget_s`. Must not: search, read the cache or time anything (the warm-up runs the
plan with the finder).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..profilers.anchors import is_anchor
from ..profilers.ceilings import DATASHEET_H100_SXM, Ceilings
from ..profilers.speed_of_light import SpeedOfLight

# The share of the device's roofs the fallback reaches on what it must move: Inductor's row
# kernels ran at 65-70% of the DRAM roof where kernelpro's reached 95-99% (H100, BENCHMARKS.md:
# softmax 4096x65536 1.062 ms against 0.727 ms at 99% of speed of light; InstanceNorm
# 112x64x512x512 7.712 ms against 5.204 ms at 97%).
FALLBACK_ATTAINS = 0.7

# The least a search is given (seconds): two generations of trials at the default 8 workers
# (a trial compiles in ~1.8 s of CPU and is timed in ~0.7 s on an H100; the plateau rule
# watches 16 trials). With less time left before the deadline no search starts.
MIN_SEARCH_S = 20.0


# The share of the speed-of-light bound kernelpro's own kernels reach, by the subgraph's first
# op, where that share is far under the roofs. Its convolution templates' best candidate of
# each search ran at 14-43% of the bound (ResNet-50 fp32 and ConvNeXt-T bf16 warm-ups, H100 and
# H200, 2026-12-07, docs/gpu_runs/2026-12-07-warmup-cnn), where its GEMMs reach 71-90% and its
# row kernels 95-99%. A key's gain is then the fallback's time less what such a kernel would
# take: a dense convolution cuDNN runs at 57% of the bound (ResNet-50's, which the plan put
# first and every search of which lost) promises nothing, a depthwise one cuDNN runs at 5%
# keeps most of its promise (a search found it 3.1x at 16%).
#
# Its attention templates: at T5's encoder size (bf16, B8 H12 S1024 D64, the best of six
# configurations, H100, 2026-12-07, docs/gpu_runs/2026-12-07-attention-bias) 33% of the bound
# forward and 24% backward. The efficient kernels there ran at 11% (a bias: worth a search);
# flash attention runs at ~43% (causal B4 H16 S2048, 2026-11-23), which they cannot beat, so
# a warm-up does not spend its time there.
KERNELS_ATTAIN = {
    "convolution": 0.45, "convolution_backward": 0.45, "sdpa": 0.33, "sdpa_backward": 0.24,
}  # fmt: skip


def kernels_attain(pattern: str) -> float:
    """The share of the bound a kernel for a subgraph of this pattern reaches (KERNELS_ATTAIN
    by its first op, else 1: the bound itself)."""
    return KERNELS_ATTAIN.get(pattern.split("+", 1)[0], 1.0)


@dataclasses.dataclass(frozen=True)
class Estimate:
    """One call of a subgraph: its speed-of-light bound, the fallback's estimated time and the
    share of the bound its kernels reach (`attain`)."""

    sol_ms: float
    fallback_ms: float
    attain: float = 1.0

    @property
    def gain_ms(self) -> float:
        return max(0.0, self.fallback_ms - self.sol_ms / self.attain)

    @classmethod
    def of(
        cls, subgraph: Any, ceilings: Ceilings, copies: int = 0, library_ms: float | None = None
    ) -> Estimate:
        """`copies`: bytes the graph's copies around a kernel move (in the bound);
        `library_ms`: the subgraph's library calls' measured time, the least the fallback
        takes."""
        work = SpeedOfLight.work(subgraph)
        copied = dataclasses.replace(work, bytes=work.bytes + copies)
        sol = SpeedOfLight.time_ms(copied, ceilings, subgraph.precision)
        moved = dataclasses.replace(work, bytes=work.bytes + round_trip_bytes(subgraph))
        fallback = SpeedOfLight.time_ms(moved, ceilings, subgraph.precision) / FALLBACK_ATTAINS
        attain = kernels_attain(str(getattr(subgraph, "pattern", "")))
        return cls(sol, max(fallback, library_ms or 0.0), attain)


def round_trip_bytes(subgraph: Any) -> int:
    """Bytes the fallback moves beyond the bound: each GEMM/conv/attention output read again
    inside the subgraph is written by the extern kernel and read back (once more where the
    subgraph does not also output it)."""
    members = set(subgraph.nodes)
    outputs = set(getattr(subgraph, "outputs", ()))
    total = 0
    for node in subgraph.nodes:
        if not is_anchor(node):
            continue
        if not any(user in members for user in node.users):
            continue
        written = _tensor_bytes(node.meta.get("val"))
        total += written if node in outputs else 2 * written
    return total


def _tensor_bytes(val: Any) -> int:
    if isinstance(val, torch.Tensor):
        return int(val.numel() * val.element_size())
    if isinstance(val, (tuple, list)):
        return sum(_tensor_bytes(v) for v in val[:1])  # attention: its output, not its stats
    return 0


def planning_ceilings(measured: Ceilings | None) -> Ceilings:
    """The measured ceilings, or off the GPU the H100 SXM datasheet's (only the order and the
    floor read them; CPU tests plan with these)."""
    if measured is not None:
        return measured
    sheet = DATASHEET_H100_SXM
    return Ceilings(
        device_name="H100 SXM (datasheet)",
        dram_bytes_per_s=sheet["dram_bytes_per_s"],
        fp32_flops_per_s=sheet["fp32_flops_per_s"],
        tf32_flops_per_s=sheet["tf32_flops_per_s"],
        bf16_flops_per_s=sheet["bf16_flops_per_s"],
        l2_bytes=50 * 2**20,
    )


@dataclasses.dataclass
class PlanItem:
    """One distinct cache key of the step: its first occurrence, how many there are, the
    estimate, and what became of it (`status`; `why` for a skip)."""

    digest: str
    subgraph: Any
    count: int
    estimate: Estimate
    status: str = "planned"  # planned, below floor, cached, searched before, not selected;
    # after the searches: kernel, fallback, skipped, not reached
    why: str = ""
    seconds: float = 0.0
    budget_s: float | None = None

    @property
    def gain_ms(self) -> float:
        """The estimated gain a step: every occurrence's."""
        return self.count * self.estimate.gain_ms


@dataclasses.dataclass
class SearchPlan:
    """A step's distinct subgraph keys: `planned` in descending estimated gain, `others` not
    planned (cached, below the floor, searched before, not selected), `floor_ms` the gain a
    call a planned key must promise, `occurrences` the step's static subgraphs."""

    planned: list[PlanItem]
    others: list[PlanItem]
    floor_ms: float
    occurrences: int

    def items(self) -> list[PlanItem]:
        return [*self.planned, *self.others]

    def count(self, status: str) -> int:
        return sum(item.status == status for item in self.items())

    def gain_left_ms(self, start: int) -> float:
        return sum(item.gain_ms for item in self.planned[start:])

    def counts(self) -> dict[str, int]:
        """planned / searched / found / below floor / not reached / cached / searched before."""
        return {
            "distinct": len(self.items()),
            "occurrences": self.occurrences,
            "planned": len(self.planned),
            "searched": sum(i.status in ("kernel", "fallback") for i in self.planned),
            "found": self.count("kernel"),
            "skipped": self.count("skipped"),
            "not_reached": self.count("not reached"),
            "below_floor": self.count("below floor"),
            "cached": self.count("cached"),
            "searched_before": self.count("searched before"),
            "not_selected": self.count("not selected"),
        }


def plan_searches(
    subgraphs: Sequence[Any],
    digest_of: Callable[[Any], str],
    ceilings: Ceilings,
    floor_ms: float,
    known: Callable[[str], str | None] = lambda digest: None,
    selected: Callable[[Any], bool] = lambda subgraph: True,
    copies: Callable[[Any], int] = lambda subgraph: 0,
    measured: Callable[[Any], float | None] = lambda subgraph: None,
) -> SearchPlan:
    """The plan of a step's `subgraphs` (symbolic ones are left out: their sizes are searched
    per instance at run time). `digest_of`: the cache key's digest; `known(digest)`: "cached"
    or "searched before" for a key that needs no search, else None; `selected`: whether the
    options let the subgraph be searched (search_patterns); `copies`: the bytes the graph's
    copies around a kernel for it move; `measured`: its library calls' measured ms a call
    (profilers/anchors.py), asked only of a key that would be searched."""
    first: dict[str, Any] = {}
    counts: dict[str, int] = {}
    for sg in subgraphs:
        if sg.symbolic:
            continue
        digest = digest_of(sg)
        first.setdefault(digest, sg)
        counts[digest] = counts.get(digest, 0) + 1
    planned, others = [], []
    for digest, sg in first.items():
        status = known(digest)
        if status is None and not selected(sg):
            status = "not selected"
        library_ms = measured(sg) if status is None else None
        estimate = Estimate.of(sg, ceilings, copies(sg), library_ms)
        item = PlanItem(digest, sg, counts[digest], estimate)
        if status is None and item.estimate.gain_ms < floor_ms:
            status = "below floor"
            item.why = (
                f"estimated gain {item.estimate.gain_ms * 1e3:.2f} us a call, under the "
                f"{floor_ms * 1e3:.1f} us a kernel must save to be used"
            )
        if status is None:
            planned.append(item)
        else:
            item.status = status
            others.append(item)
    planned.sort(key=lambda i: (-i.gain_ms, i.digest))
    others.sort(key=lambda i: (-i.gain_ms, i.digest))
    return SearchPlan(planned, others, floor_ms, sum(counts.values()))


def search_budget_s(
    gain_ms: float, gain_left_ms: float, left_s: float | None, max_s: float
) -> float | None:
    """The seconds one planned search gets: its share of the search time left (`left_s`, None:
    no deadline, then `max_s`) by its share of the estimated gain still to search, at least
    MIN_SEARCH_S and at most `max_s` (Options.budget_s), never past the time left. None: too
    little time left to start one."""
    if left_s is None:
        return max_s
    least = min(MIN_SEARCH_S, max_s)
    if left_s < least:
        return None
    share = left_s * gain_ms / gain_left_ms if gain_left_ms > 0 else left_s
    return min(max_s, max(least, share), left_s)
