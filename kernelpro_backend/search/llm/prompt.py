"""The LLM proposer's prompt: what the model is told about one node of the search.

Owns: the system message (the task, the JSON answer format, the Triton and CUDA source
contracts) and the user message built from a `ProposalRequest`: the subgraph (pattern, ops,
canonical text, input/output shapes and dtypes, precision policy), the node's candidate (a
KernelSpec's JSON and rendered source, or free-form source), its measurement, the typed
findings as plain-language lines, the history of the search, and the legal knob space.
Must not: call the endpoint or read its answer (client.py and answer.py do).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from ...profilers.findings import Finding
from ...runtime.candidate import SourceCandidate
from ...runtime.cuda.source import CONTRACT
from ..proposer import ProposalRequest

log = logging.getLogger("kernelpro.llm")

# Bounds on the prompt (characters): a long attention graph or GEMM template must not push the
# findings and history out of a 32 K-token context.
MAX_TEXT = 6000
MAX_SOURCE = 24000
MAX_HISTORY = 40  # most recent trials shown
MAX_MESSAGE = 300  # of a failed trial's message: its first line says what went wrong


CUDA_CONTRACT = CONTRACT
TRITON_CONTRACT = """\
`source` is a Python module; it may import torch and triton and define @triton.jit kernels.
It defines a host function named `entry` that takes the subgraph's inputs as tensors, in the
order listed, and returns a list of fresh output tensors in the order listed, each with exactly
the shape and dtype listed (on the inputs' device). It must not modify its inputs, keep state
between calls, or return views of its inputs. The rendered source of a KernelSpec shown below
is itself such a module (entry "entry") and may be the starting point of a rewrite."""

ANSWER_FORMAT = """\
Answer with one JSON object and nothing else:
{{"proposals": [PROPOSAL, ...]}}
with at most {n} proposals, the most promising first. A PROPOSAL is one of
  {{"knobs": {{"NAME": VALUE, ...}}, "reason": "why, in one sentence"}}
    a change of some knobs of the KernelSpec shown (the others keep their values); names and
    values from the legal knob space only. Not available for free-form source.
  {{"language": "triton" | "cuda", "entry": "NAME", "source": "...", "reason": "..."}}
    a complete kernel written from scratch or rewritten from the source shown.
Do not propose a candidate that the history shows was tried already."""

SYSTEM = """\
You are an expert GPU kernel engineer. You improve the kernel of one fused subgraph of a
PyTorch model. A harness compiles every proposal in an isolated process, checks it against
PyTorch on several sets of random inputs (tolerance from the dtype; wrong, crashing or
hanging kernels are rejected) and times it on the GPU; faster correct kernels win. Use the
findings of the profilers: they name what limits the current kernel and what to change.

{answer}
{languages}"""


def system_message(max_proposals: int, languages: Sequence[str]) -> str:
    parts = []
    if "triton" in languages:
        parts.append(f'Triton sources (language "triton"):\n{TRITON_CONTRACT}')
    if "cuda" in languages:
        parts.append(f'CUDA sources (language "cuda"):\n{CUDA_CONTRACT}')
    allowed = "Rewrites are accepted in: " + ", ".join(languages) + "." if languages else ""
    if not languages:
        allowed = "Only knob changes are accepted; do not propose source."
    return SYSTEM.format(
        answer=ANSWER_FORMAT.format(n=max_proposals),
        languages="\n\n".join([allowed, *parts]),
    )


def user_message(request: ProposalRequest) -> str:
    sections = [
        ("Subgraph", _subgraph(request.subgraph)),
        ("Current candidate", _candidate(request)),
        ("Its measurement", _measurement(request)),
        ("Findings", _findings(request.findings)),
        ("Tried so far", _history(request.history)),
        ("Legal knob space", _knob_space(request)),
    ]
    return "\n\n".join(f"## {title}\n{body}" for title, body in sections)


def messages(
    request: ProposalRequest, max_proposals: int, languages: Sequence[str]
) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": system_message(max_proposals, languages)},
        {"role": "user", "content": user_message(request)},
    ]


# ---- sections -------------------------------------------------------------------------------


def _subgraph(sg: Any) -> str:
    lines = [
        f"pattern: {getattr(sg, 'pattern', '?')} (kind {getattr(sg, 'kind', '?')}, "
        f"{getattr(sg, 'graph', '?')} graph)",
        f"precision policy: {getattr(sg, 'precision', '?')} "
        "(ieee: float32 matmuls in IEEE float32, no TF32; tf32/tf32x3: those modes allowed)",
    ]
    ops = getattr(sg, "ops", None)
    if ops:
        lines.append("ops: " + ", ".join(str(o) for o in ops))
    for label, attr, prefix in (("inputs", "input_meta", "in"), ("outputs", "output_meta", "out")):
        metas = _metas(sg, attr)
        if metas:
            lines.append(f"{label}, in order:")
            lines += [
                f"  {prefix}{i}: shape {list(shape)}, stride {list(stride)}, {dtype}"
                for i, (shape, stride, dtype) in enumerate(metas)
            ]
    text = getattr(sg, "text", None)
    if text:
        lines.append("canonical aten graph:\n" + _cut(str(text), MAX_TEXT))
    return "\n".join(lines)


def _metas(sg: Any, attr: str) -> list[tuple[Any, Any, Any]]:
    metas = getattr(sg, attr, None)  # stand-in subgraphs of tests may lack it
    return list(metas) if isinstance(metas, (list, tuple)) else []


def _candidate(request: ProposalRequest) -> str:
    c = request.candidate
    if isinstance(c, SourceCandidate):
        return (
            f"free-form {c.language} source, entry {c.entry!r}:\n"
            f"```{'python' if c.language == 'triton' else 'cuda'}\n"
            f"{_cut(c.source, MAX_SOURCE)}\n```"
        )
    to_json = getattr(c, "to_json", None)
    if not callable(to_json):  # a search space of tests: its summary is all there is
        return "candidate: " + json.dumps(request.space.describe(c), sort_keys=True, default=str)
    out = f"KernelSpec (JSON):\n{_cut(str(to_json()), MAX_TEXT)}"
    rendered = _render(c)
    if rendered is not None:
        out += f"\nrendered Triton source (entry {rendered.entry!r}):\n```python\n"
        out += _cut(rendered.source, MAX_SOURCE) + "\n```"
    return out


def _render(spec: Any) -> Any:
    try:
        from ...codegen import render  # lazily: the search runs without codegen

        return render(spec)
    except Exception as e:  # the spec is shown as JSON still; a rendering bug is not hidden
        log.warning(
            "cannot render the %s spec for the prompt (%s: %s); showing its JSON only",
            getattr(spec, "template", "?"),
            type(e).__name__,
            e,
        )
        return None


def _measurement(request: ProposalRequest) -> str:
    r = request.result
    if not r.ok:
        out = f"status {r.status.value}: {r.message or 'no message'}"
        if r.details:
            out += "\ndetails: " + _cut(json.dumps(r.details, sort_keys=True, default=str), 2000)
        return out
    parts = [f"status ok, median {_ms(r.median_ms)}"]
    if r.spread_ms is not None:
        parts.append(f"spread +-{_ms(r.spread_ms)}")
    if r.sol_fraction is not None:
        parts.append(f"{100 * r.sol_fraction:.0f}% of speed of light ({_ms(r.sol_ms)})")
    if r.energy_j is not None:
        parts.append(f"{r.energy_j:.3g} J per call")
    return ", ".join(parts)


def finding_line(f: Finding) -> str:
    """One finding in plain language: `[high] ptxas spill_bytes = 128 (threshold 0): ...`."""
    line = f"[{f.severity.value}] {f.tool} {f.metric} = {_value(f.value)}"
    if f.threshold is not None:
        line += f" (threshold {_value(f.threshold)})"
    line += f": {f.guidance}"
    if f.suggestion:
        line += f" Suggested knob change: {json.dumps(dict(f.suggestion), sort_keys=True)}."
    return line


def _findings(findings: Sequence[Finding]) -> str:
    if not findings:
        return "none (no profiler ran, or nothing stood out)"
    return "\n".join("- " + finding_line(f) for f in findings)


def _history(history: Sequence[dict[str, Any]]) -> str:
    if not history:
        return "nothing yet"
    shown = list(history)[-MAX_HISTORY:]
    lines = []
    if len(shown) < len(history):
        lines.append(f"({len(history) - len(shown)} earlier trials not shown)")
    for h in shown:
        parent = f"from #{h['parent']}" if h.get("parent") is not None else "seed"
        result = str(h.get("status", "?"))
        if h.get("median_ms") is not None:
            result += f" {_ms(h['median_ms'])}"
        elif h.get("message"):
            message = " ".join(str(h["message"]).split())
            cut = message[:MAX_MESSAGE] + ("..." if len(message) > MAX_MESSAGE else "")
            result += f" ({cut})"
        candidate = json.dumps(h.get("candidate"), sort_keys=True, default=str)
        lines.append(f"- #{h.get('id')} ({parent}, move {h.get('move')}): {result}; {candidate}")
    return "\n".join(lines)


def _knob_space(request: ProposalRequest) -> str:
    values = request.space.knob_space(request.candidate)
    if not values:
        return "none: the current candidate is free-form source; propose rewrites only"
    current = request.space.knobs(request.candidate)
    lines = ["(values legal with the other knobs held; a combination is checked when proposed)"]
    for name, legal in sorted(values.items()):
        shown = json.dumps(list(legal), default=str)
        lines.append(f"- {name}: {shown} (now {json.dumps(current.get(name), default=str)})")
    return "\n".join(lines)


def _value(v: float | str) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _ms(ms: float | None) -> str:
    return "? ms" if ms is None else f"{ms:.4g} ms"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n... ({len(text) - limit} chars cut)"
