"""The package's layers: every import (function-local ones included) goes down, never up or
around a loop.

Each top-level package or module of kernelpro_backend has a rank; a module may import another
part of the package only if that part's rank is lower, or if it is in the same package. Inside a
package the modules' imports form no cycle. So cache/, runtime/, profilers/, codegen/ and
fx_passes/ never reach the entry point (backend, explain, warmup) or the command line (cli/).
A new top-level package or module fails here until it is given a rank.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kernelpro_backend
from kernelpro_backend.version import __version__

PACKAGE = Path(kernelpro_backend.__file__).parent
NAME = PACKAGE.name

RANKS = {
    # how the package logs and warns: every layer may, so it imports nothing of the package
    "logs": -1,
    # plain data and on-disk locations: import nothing of the package
    "version": 0,
    "text_table": 0,
    "options": 0,
    "paths": 1,
    # graphs, and what works on a subgraph without running anything
    "fx_passes": 2,
    "codegen": 3,  # KernelSpec -> source; no fx
    "profilers": 3,  # tools, roofline, speed of light; runs nothing of ours
    "cache": 3,  # storage: no policy, no CLI
    "lowering": 4,  # fx -> KernelSpec
    "runtime": 4,  # isolated workers: compile, validate, time, feedback
    "ops": 4.5,  # custom ops that compute (LM head + loss, CUTLASS GEMM) over runtime; fast_op
    "search": 5,
    "rewrite": 5,  # kernels into aten graphs: launch op, inline, shape dispatch, guards; providers
    "tuner": 6,  # the per-subgraph policy; composes cache, search, runtime
    "backend": 7,
    "explain": 8,
    "warmup": 8,  # the offline warm-up, its rows, the in-context check of a step
    "examples": 8,
    "bench": 9,  # workloads, side-by-side runs (the demo among them), reports
    "cli": 10,
    "__init__": 11,
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(module: str, path: Path) -> set[str]:
    """The package's modules that `module` imports anywhere in its source."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = (
                package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            )
            target = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:  # `from . import x` imports the module x
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in MODULES else target)
    return {m for m in found if m in MODULES and m != module}


def _part(module: str) -> str:
    """The top-level package or module a module belongs to ("__init__" for the package root)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def test_every_top_level_part_has_a_rank():
    assert sorted({_part(m) for m in MODULES} - set(RANKS)) == []


def test_imports_go_down_the_layers():
    upward = []
    for module, targets in GRAPH.items():
        for target in targets:
            a, b = _part(module), _part(target)
            if a != b and not (b == "__init__" and target == NAME) and RANKS[b] >= RANKS[a]:
                upward.append(f"{module} -> {target} ({a} {RANKS[a]} -> {b} {RANKS[b]})")
            elif b == "__init__" and a not in ("cli", "__init__"):
                upward.append(f"{module} -> {target} (the package root imports the entry point)")
    assert sorted(upward) == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_between_modules():
    # A package's __init__ importing its own modules is not a loop back into the package.
    graph = {
        m: {t for t in ts if not (MODULES[m].name == "__init__.py" and t.startswith(m + "."))}
        for m, ts in GRAPH.items()
    }
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_loop():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_version_matches_pyproject():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]
    assert project["version"] == __version__
