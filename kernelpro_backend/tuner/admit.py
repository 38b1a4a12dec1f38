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
- free-form Triton source (no spec): only a module made of the forms kernelpro's own codegen
  writes (tuner/source_grammar.py: a positive grammar, not a deny-list); it still is Python, so
  it runs first in an isolated worker (runtime/isolation.py: no inherited secrets, a fresh
  working directory) and is proved there before the user's process loads it;
- an eager ATen entry (tuner/eager.py): no code at all; it runs the subgraph's own ops.
Everything else is refused, with the reason, before any of its code runs.

The spec is parsed within limits (cache/limits.py: size, nesting depth) and nothing it holds
can raise out of `admit`: whatever breaks is the reason it is refused.

Owns: `admit(artifact) -> reason | artifact to load instead | None` (None: as it is),
`triton_source_problem(source, entry) -> reason | None` and `admission_note(artifact)` (what
was checked, for the import's output).
Must not: load, run or store kernels.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from ..cache.artifact import KernelArtifact
from ..cache.limits import MAX_SPEC_BYTES, LimitExceeded, loads_bounded
from ..version import generator_version
from .source_grammar import source_problem

_TOKEN = re.compile(r"[A-Za-z0-9_.+\-]*")


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
        problem = triton_source_problem(artifact.source, artifact.entry)
        return f"free-form Triton source refused: {problem}" if problem else None
    try:
        return _spec_problem(artifact)
    except Exception as e:  # the spec came from outside: whatever it breaks refuses it
        return f"its KernelSpec could not be checked ({type(e).__name__}: {str(e)[:200]})"


def _spec_problem(artifact: KernelArtifact) -> str | KernelArtifact | None:
    try:
        raw = loads_bounded(artifact.spec_json or "", "its KernelSpec", MAX_SPEC_BYTES)
    except LimitExceeded as e:
        return str(e)
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


def triton_source_problem(source: str, entry: str | None = None) -> str | None:
    """None when `source` fits the grammar of the modules kernelpro emits
    (tuner/source_grammar.py); else the first thing that does not, with its line."""
    return source_problem(source, entry)


def admission_note(artifact: KernelArtifact) -> str:
    """What was checked of an admitted entry, in the words `kernelpro cache import` prints."""
    if artifact.language == "aten":
        return "eager ATen: no code, the subgraph's own ops"
    if artifact.language == "cuda":
        return "a cubin: device code, loaded through the driver"
    if artifact.spec_json is None:
        return "admitted by the source grammar; runs only in isolated workers until proved"
    if artifact.provenance.toolchain.generator != generator_version():
        return "re-rendered from its spec by this kernelpro (its stored source is not used)"
    return "re-rendered from its spec and identical"
