"""Stage 2 of the feedback: the registry of micro-profiling tools.

Owns: `ProfileTarget` (what a tool may look at: the callable and its inputs, its knobs, the
compiled Triton kernels or a cubin, an ncu command line), the `Tool` protocol (name, the
bottleneck classes it applies to, its cost in seconds, `run(target) -> list[Finding]`) and
`tools_for(bottleneck)`, which picks the tools that the stage-1 class calls for.
Must not: change kernels, or run a tool whose class was not called for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Protocol

from .findings import Bottleneck, Finding

ALL_CLASSES = frozenset(Bottleneck)


@dataclasses.dataclass
class ProfileTarget:
    """One kernel (or a callable that launches one) to profile.

    `compiled`: Triton `CompiledKernel`s (anything with `.asm`, `.n_regs`, `.n_spills`,
    `.metadata`); found automatically from `fn` when left empty. `ncu_command`: an argv that
    runs the kernel under `cudaProfilerStart/Stop` (see ncu_launcher); built from `fn` and
    `inputs` by pickling when left empty."""

    fn: Callable[..., Any] | None = None
    inputs: Sequence[Any] = ()
    knobs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    kernel_name: str | None = None  # regex on the kernel name for ncu; None: the first launch
    compiled: Sequence[Any] = ()
    cubin: bytes | None = None
    ptxas_report: str | None = None  # `ptxas -v` text, e.g. from an nvcc build
    ncu_command: Sequence[str] | None = None
    element_bytes: int = 4  # of the main dtype: sets the ideal load width
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)  # run_tools: per tool


class Tool(Protocol):
    name: str
    applies_to: frozenset[Bottleneck]
    cost_s: float  # typical wall time of one run, so a budget can skip the expensive ones

    def available(self) -> str | None:
        """None when the tool can run here, else why not (one line)."""
        ...

    def run(self, target: ProfileTarget) -> list[Finding]: ...


_REGISTRY: dict[str, Callable[[], Tool]] = {}


def register(name: str, factory: Callable[[], Tool]) -> None:
    _REGISTRY[name] = factory


def registered() -> dict[str, Callable[[], Tool]]:
    _load_builtin_tools()
    return dict(_REGISTRY)


def tools_for(
    bottleneck: Bottleneck,
    *,
    names: Sequence[str] | None = None,
    budget_s: float | None = None,
    among: Collection[str] | None = None,
) -> list[Tool]:
    """The tools that apply to `bottleneck` (or exactly `names`), cheapest first, within budget.

    `among`: only tools of these names are considered (before the budget is spent), e.g. the
    stage-2 tools a search allows."""
    factories = registered()
    if names is not None:
        unknown = [n for n in names if n not in factories]
        if unknown:
            raise KeyError(f"unknown profiling tools {unknown}; known: {sorted(factories)}")
        chosen = [factories[n]() for n in names]
    else:
        chosen = [f() for n, f in factories.items() if among is None or n in among]
        chosen = [t for t in chosen if bottleneck in t.applies_to]
    chosen.sort(key=lambda t: t.cost_s)
    if budget_s is not None:
        kept, spent = [], 0.0
        for tool in chosen:
            if spent + tool.cost_s <= budget_s:
                kept.append(tool)
                spent += tool.cost_s
        chosen = kept
    return chosen


def _load_builtin_tools() -> None:
    if _REGISTRY:
        return
    from .compiler_resources import CompilerResourceTool
    from .energy import EnergyTool
    from .ncu import NcuTool
    from .sass import SassTool
    from .timeline import TimelineTool

    for factory in (CompilerResourceTool, SassTool, TimelineTool, EnergyTool, NcuTool):
        register(factory.name, factory)
