"""Stage 2 of the feedback: the registry of micro-profiling tools.

Owns: `register`, `registered` and `tools_for(bottleneck)`, which picks the tools that the
stage-1 class calls for (what a tool looks at and provides is target.py's `ProfileTarget` and
`Tool`, re-exported here).
Must not: change kernels, or run a tool whose class was not called for.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from .findings import Bottleneck
from .target import ALL_CLASSES, ProfileTarget, Tool

__all__ = ["ALL_CLASSES", "ProfileTarget", "Tool", "register", "registered", "tools_for"]

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
