"""Admitting kernels that did not come out of this process: bundles, read-only cache directories.

A shipped kernel is code that would run in the user's process, so an entry from outside is
admitted only when what it would run is this kernelpro's own output or device code:
- a spec-built Triton entry: every string in its KernelSpec is a plain token (letters, digits,
  `_ . + -`: nothing that can end a Python literal or start a statement), and what runs is what
  this generator renders from that spec. An entry made by this very generator must store
  exactly that source (a different one was modified: refused); one made by another generator
  version is admitted with its source re-rendered here (the stored one never runs; the kernel
  is proved again before first use, as every entry from elsewhere is), so a cache shipped with
  a model survives a kernelpro upgrade;
- a CUDA entry: its stored cubin (device code, loaded through the driver; the loader parses the
  launch header, no host code of the entry runs);
- free-form Triton source (no spec): only a module that passes `triton_source_problem`'s
  allow-list — which no host launcher passes, so such entries are refused with that reason.
- an eager ATen entry (tuner/eager.py): no code at all; it runs the subgraph's own ops.
Everything else is refused, with the reason, before any of its code runs.

Owns: `admit(artifact) -> reason | artifact to load instead | None` (None: as it is) and
`triton_source_problem(source) -> reason | None`.
Must not: load, run or store kernels.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from typing import Any

from ..cache.artifact import KernelArtifact
from ..version import generator_version

_TOKEN = re.compile(r"[A-Za-z0-9_.+\-]*")
_IMPORTS = {"triton", "triton.language", "math"}


def admit(artifact: KernelArtifact) -> str | KernelArtifact | None:
    """None when the entry may be loaded here as it is; the artifact to load instead (its
    source rendered here); else why it is refused (one line)."""
    if artifact.language == "aten":
        # It runs the subgraph's reference, rebuilt from the canonical text the key hashes.
        if artifact.source or artifact.binary is not None or artifact.spec_json is not None:
            return "an eager ATen entry carries no code, and this one does"
        return None
    if artifact.language == "cuda":
        if artifact.binary is None:
            return "a CUDA entry without its cubin: its source would have to be compiled here"
        return None
    if artifact.language != "triton":
        return f"{artifact.language!r} kernels from outside are never run"
    if artifact.spec_json is None:
        problem = triton_source_problem(artifact.source)
        return f"free-form Triton source refused: {problem}" if problem else None
    return _spec_problem(artifact)


def _spec_problem(artifact: KernelArtifact) -> str | KernelArtifact | None:
    try:
        raw = json.loads(artifact.spec_json or "")
    except ValueError as e:
        return f"its KernelSpec is not JSON: {e}"
    odd = _odd_string(raw)
    if odd is not None:
        return f"its KernelSpec holds {odd[:40]!r}, not a plain token"
    from ..codegen import KernelSpec, render

    try:
        rendered = render(KernelSpec.from_json(artifact.spec_json or ""))
    except Exception as e:  # a spec this generator cannot render is not ours
        return f"this kernelpro cannot render its KernelSpec ({type(e).__name__}: {e})"
    if (rendered.source, rendered.entry) == (artifact.source, artifact.entry):
        return None
    if artifact.provenance.toolchain.generator == generator_version():
        return "its stored source is not what this kernelpro renders from its KernelSpec"
    return dataclasses.replace(artifact, source=rendered.source, entry=rendered.entry)


def _odd_string(value: Any) -> str | None:
    """The first string (key or value) in a JSON document that is not a plain token."""
    if isinstance(value, str):
        return None if _TOKEN.fullmatch(value) else value
    if isinstance(value, dict):
        items = [*value.keys(), *value.values()]
    elif isinstance(value, list):
        items = value
    else:
        return None
    for item in items:
        found = _odd_string(item)
        if found is not None:
            return found
    return None


def triton_source_problem(source: str) -> str | None:
    """None when `source` holds only imports of triton / triton.language / math, constants and
    `@triton.jit` functions whose decorators, defaults and annotations are plain names or
    constants (nothing of it runs at import); else the first thing that is not."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return f"does not parse: {e.msg} (line {e.lineno})"
    for node in tree.body:
        problem = _top_level_problem(node)
        if problem:
            return f"line {getattr(node, 'lineno', '?')}: {problem}"
    return None


def _top_level_problem(node: ast.stmt) -> str | None:
    if isinstance(node, ast.Import):
        bad = [a.name for a in node.names if a.name not in _IMPORTS]
        return f"imports {', '.join(bad)}" if bad else None
    if isinstance(node, ast.ImportFrom):
        whole = f"{node.module}.{node.names[0].name}" if node.module else ""
        ok = node.level == 0 and (node.module in _IMPORTS or whole in _IMPORTS)
        return None if ok else f"imports from {node.module}"
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return None  # a docstring
    if isinstance(node, ast.Assign) and _constant(node.value):
        return (
            None
            if all(isinstance(t, ast.Name) for t in node.targets)
            else "assigns to more than names"
        )
    if isinstance(node, ast.FunctionDef):
        return _jit_function_problem(node)
    return f"{type(node).__name__} at top level (only imports, constants and @triton.jit functions)"


def _jit_function_problem(node: ast.FunctionDef) -> str | None:
    if [ast.unparse(d) for d in node.decorator_list] != ["triton.jit"]:
        return f"function {node.name} is not decorated with exactly @triton.jit"
    arguments = node.args
    for default in [*arguments.defaults, *arguments.kw_defaults]:
        if default is not None and not _constant(default):
            return f"function {node.name} has a default that is not a constant"
    for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
        if arg.annotation is not None and ast.unparse(arg.annotation) not in (
            "tl.constexpr",
            "triton.language.constexpr",
        ):
            return (
                f"function {node.name} annotates {arg.arg} with something other than tl.constexpr"
            )
    if node.returns is not None:
        return f"function {node.name} has a return annotation"
    return None


def _constant(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return isinstance(node.operand, ast.Constant)
    return False
