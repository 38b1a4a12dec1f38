"""`explain`: which subgraphs kernelpro finds in a model, without compiling kernels.

Owns: running a model once (and its backward when it trains) under a recording backend with the
eager fallback, and presenting the subgraphs as rows or a table; `explain_model` also applies
the torch-level rewrites a real compile makes (hand-written attention -> SDPA, an LM head and
its loss -> the chunked or fused op) and counts them, so the rows are the subgraphs a compile
sees, and can collect each candidate chain the rewrites looked at (`ChainNote`: made, or
refused with the reason), the graph breaks dynamo made in the model's code (`GraphBreak`:
the cause and where, from the reasons dynamo records while it compiles: no second trace), and
the inputs whose values a rewrite relied on, with how a compile checks them on each call
(`ReliedInput`: a causal mask in a buffer, a mask an earlier graph proved constant).
Must not: search, cache or change the caller's model (it works on a copy).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import re
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from . import text_table
from .backend import make_backend
from .fx_passes import Subgraph
from .fx_passes.mask_provenance import relied_masks
from .fx_passes.torch_level import ChainNote, input_name
from .fx_passes.torch_rewrites import placeholder_values, torch_rewrites
from .options import Options

log = logging.getLogger("kernelpro")


@dataclasses.dataclass(frozen=True)
class SubgraphInfo:
    graph: str  # forward | backward | inference
    kind: str
    pattern: str
    ops: tuple[str, ...]
    inputs: tuple[str, ...]  # "f32[32, 64]"
    key: str  # digest, or "symbolic"
    # What a search measures beside the fallback: the seed's template and the alternatives
    # (e.g. "row_reduction", "row_cluster"), or why none ("none: <reason>")
    templates: tuple[str, ...] = ()

    def row(self, reasons: dict[str, int]) -> list[str]:
        """The table's cells; a template's "none: <reason>" shows as "none [n]", the reason
        numbered in `reasons` (printed whole under the table, never cut)."""
        ops = " ".join(self.ops)
        if len(ops) > 60:
            ops = ops[:57] + "..."
        shown = []
        for t in self.templates:
            word, sep, reason = t.partition(": ")
            if sep and word in ("none", "error"):
                t = f"{word} [{reasons.setdefault(reason, len(reasons) + 1)}]"
            shown.append(t)
        kernels = " ".join(shown)
        return [
            self.graph, self.kind, self.pattern, kernels, ops, " ".join(self.inputs), self.key[:12]
        ]  # fmt: skip


_SHORT = {
    "float32": "f32",
    "float16": "f16",
    "bfloat16": "bf16",
    "float64": "f64",
    "int64": "i64",
    "bool": "b8",
}


def describe(sg: Subgraph) -> SubgraphInfo:
    inputs = []
    for p in sg.inputs:
        val = p.meta.get("val")
        if isinstance(val, torch.Tensor):
            dt = str(val.dtype).removeprefix("torch.")
            inputs.append(f"{_SHORT.get(dt, dt)}{list(val.shape)}")
        else:
            inputs.append(type(val).__name__)
    return SubgraphInfo(
        graph=sg.graph,
        kind=sg.kind,
        pattern=sg.pattern,
        ops=tuple(sg.ops),
        inputs=tuple(inputs),
        key="symbolic" if sg.symbolic else sg.key.digest,
        templates=templates_of(sg),
    )


def templates_of(sg: Subgraph) -> tuple[str, ...]:
    """The templates kernelpro generates candidates from for `sg` (the lowered seed's, then
    each alternative's), or ("none: <why>",) when the lowering refuses it."""
    from .codegen import Unsupported, alternatives
    from .lowering import lower

    try:
        seed = lower(sg)
        found = alternatives(seed)
    except Unsupported as e:
        return (f"none: {' '.join(str(e).split())}",)  # the whole reason: the table wraps it
    except Exception as e:  # a lowering bug: the search would meet it too; say so
        log.warning("lowering %s %s failed: %r", sg.graph, sg.pattern, e)
        return (f"error: {type(e).__name__}",)
    return (seed.template, *dict.fromkeys(a.template for a in found))


def find_subgraphs(
    model: torch.nn.Module,
    *example_inputs: Any,
    train: bool | None = None,
    backend_options: Mapping[str, Any] | None = None,
    rewrites: dict[str, int] | None = None,
    relied_on: list[ReliedInput] | None = None,
    notes: list[ChainNote] | None = None,
    breaks: list[GraphBreak] | None = None,
    **compile_kwargs: Any,
) -> list[Subgraph]:
    """The subgraphs kernelpro cuts from one call of `model` (a copy: the model is untouched).
    `train` None: forward and backward when the output requires grad, else the inference
    graph; True/False forces the choice (False runs under `torch.no_grad()`).
    `backend_options` adds backend options (e.g. a precision); search stays off.
    `rewrites`: a dict to fill with the torch-level rewrites made first, as a compile makes
    them (the options' `rewrite_*` say which); None: the graphs as written. `relied_on`: a
    list to fill with the inputs whose values a rewrite relied on (a buffer holding a causal
    mask, a mask an earlier graph proved constant), one per input and graph, named as the
    model names them, with how a compile checks them at every call. `notes`: a list to fill
    with the chains the rewrites looked at; `breaks`: with the graph breaks dynamo made."""
    found: list[Subgraph] = []

    def observe(graph_kind: str, subgraphs: Sequence[Subgraph]) -> None:
        found.extend(subgraphs)

    inner = make_backend(observer=observe)
    opts = Options.resolve(options=backend_options)

    def backend(gm: torch.fx.GraphModule, inputs: Sequence[Any], **kwargs: Any) -> Any:
        if breaks is not None:
            _graph_break(gm, breaks)
        if rewrites is not None:  # as a compile makes them (backend.torch_rewrites)
            values = placeholder_values(gm, inputs)
            relied: list[torch.fx.Node] = []
            for name, n in torch_rewrites(gm, opts, values, relied, notes).items():
                rewrites[name] = rewrites.get(name, 0) + n
            if relied_on is not None:
                relied_on.extend(relied_inputs(gm, relied))
        return inner(gm, inputs, **kwargs)

    model = copy.deepcopy(model)
    inputs = [
        x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x
        for x in example_inputs
    ]
    compiled = torch.compile(
        model,
        backend=backend,
        options={**(backend_options or {}), "fallback": "eager", "search": "off"},
        **compile_kwargs,
    )
    from torch._dynamo.utils import counters

    before = dict(counters["graph_break"])
    with torch.set_grad_enabled(train is not False):  # the backward too: a caller's no_grad
        out = compiled(*inputs)  # would leave the losses below without a graph
        leaves = [t for t in _tensors(out) if t.requires_grad and t.dtype.is_floating_point]
        if leaves and train is not False:
            torch.autograd.backward([t.float().sum() for t in leaves])
    if breaks is not None:  # breaks that ended no graph (nothing traced before them)
        seen = {b.cause for b in breaks}
        for message, n in counters["graph_break"].items():
            if n > before.get(message, 0) and _cause(message) not in seen:
                breaks.append(GraphBreak(_cause(message), ""))
    return found


@dataclasses.dataclass(frozen=True)
class ReliedInput:
    """A graph input whose value a rewrite relied on: its name as the model names it, what it
    is relied on to hold, and how a compile checks that on each call (rewrite/guarded.py)."""

    name: str
    holds: str
    check: str


_BUFFER = (
    "a causal mask read from a buffer, run as is_causal=True",
    "its version counter and storage address on each call (on the host, a few µs); when they "
    "moved, its values are read again, and once they are no longer causal the graph compiled "
    "without relying on them runs",
)
_PROVEN_CHECK = (
    "on each call, on the host, with no device read: the tensor passed must be the earlier "
    "graph's registered output, unwritten since (version counter, storage, shape, strides, "
    "dtype); a call where it is not runs the graph compiled without relying on it"
)


def relied_inputs(gm: torch.fx.GraphModule, buffers: Sequence[torch.fx.Node]) -> list[ReliedInput]:
    """The inputs of the rewritten `gm` a rewrite relied on: `buffers` (holding causal masks)
    and the placeholders marked as masks an earlier graph proved constant (sdpa_mask.py)."""
    found = [ReliedInput(input_name(node), *_BUFFER) for node in buffers]
    for node, fact in relied_masks(gm).items():
        dtype = _SHORT.get(str(fact.dtype).removeprefix("torch."), str(fact.dtype))
        held = (
            f"a mask an earlier graph proved constant: it {fact.kind} ({dtype}{list(fact.shape)})"
        )
        found.append(ReliedInput(input_name(node), held, _PROVEN_CHECK))
    return found


@dataclasses.dataclass(frozen=True)
class GraphBreak:
    """A graph break dynamo made in the model's code: why (its first lines) and where
    ("file.py:12 in forward", when dynamo recorded it)."""

    cause: str
    where: str


def _cause(message: str) -> str:
    """Dynamo's break message in one line: its title and its explanation."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    title = lines[0] if lines else "unknown"
    why = next(
        (ln.removeprefix("Explanation:").strip() for ln in lines if ln.startswith("Explanation:")),
        "",
    )
    return re.sub(r"\s+", " ", f"{title}: {why}" if why else title)


def _graph_break(gm: torch.fx.GraphModule, breaks: list[GraphBreak]) -> None:
    """The break that ended this graph, if one did (dynamo's `compile_subgraph_reason`)."""
    reason = getattr(gm, "compile_subgraph_reason", None)
    if reason is None or not getattr(reason, "graph_break", False):
        return
    stack = list(getattr(reason, "user_stack", None) or [])
    where = (
        f"{stack[-1].filename.rsplit('/', 1)[-1]}:{stack[-1].lineno} in {stack[-1].name}"
        if stack
        else ""
    )
    breaks.append(GraphBreak(_cause(str(reason.reason)), where))


def explain(
    model: torch.nn.Module, *example_inputs: Any, **compile_kwargs: Any
) -> list[SubgraphInfo]:
    """The subgraphs kernelpro finds in `model` for these inputs: forward and backward when the
    model has trainable parameters or inputs that require grad, else the inference graph."""
    return [describe(s) for s in find_subgraphs(model, *example_inputs, **compile_kwargs)]


# What each torch-level rewrite turns into, for the explain printout.
REWRITES = {
    "attention": "hand-written attention (matmul, scale, mask, softmax, matmul) -> SDPA",
    "attention_mask": "an SDPA mask built from positions alone (a constant) -> no mask when it "
    "attends everywhere, `is_causal=True` when causal",
    "attention_mask_layout": "an SDPA mask whose last dimension is strided (T5's permuted "
    "position bias) -> a contiguous copy, so CUDA's fused attention kernels take it",
    "small_table_grads": "a gradient accumulated into a small table by many indices (an "
    "embedding of few rows: T5's position buckets, token types) -> a one-hot GEMM instead of "
    "atomic adds (CUDA)",
    "linear_cross_entropy": "an LM head and its cross-entropy -> one chunked op that never "
    "writes the whole logits, or (logits kept) a cross-entropy op that reads them once",
}


def explain_model(
    model: torch.nn.Module,
    *example_inputs: Any,
    relied_on: list[ReliedInput] | None = None,
    notes: list[ChainNote] | None = None,
    breaks: list[GraphBreak] | None = None,
    **compile_kwargs: Any,
) -> tuple[list[SubgraphInfo], dict[str, int]]:
    """`explain` after the torch-level rewrites a compile makes: (the subgraphs, how many of
    each rewrite were made); `relied_on`, `notes` and `breaks` as in `find_subgraphs`."""
    made: dict[str, int] = {}
    found = find_subgraphs(
        model,
        *example_inputs,
        rewrites=made,
        relied_on=relied_on,
        notes=notes,
        breaks=breaks,
        **compile_kwargs,
    )
    return [describe(s) for s in found], made


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors(o)]
    return []


def _wrap(text: str, width: int, indent: str = "  ") -> str:
    """`text` as lines of at most `width` columns, the first indented by `indent` and the rest
    by two more: a reason is wrapped, never cut."""
    return textwrap.fill(text, width, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=False, break_on_hyphens=False)  # fmt: skip


def format_table(rows: Sequence[SubgraphInfo], width: int = 100) -> str:
    """The subgraphs as a table, then why a subgraph has no template ([n] in its row), each
    reason whole, wrapped at `width` columns."""
    header = ["graph", "kind", "pattern", "templates", "ops", "inputs", "key"]
    reasons: dict[str, int] = {}
    table = text_table.format_table(header, [r.row(reasons) for r in rows], rule=True)
    if not reasons:
        return table
    why = [_wrap(f"[{n}] {reason}", width, "") for reason, n in reasons.items()]
    return "\n".join([table, "", "no template (a search times the fallbacks alone):", *why])


def format_notes(notes: Sequence[ChainNote], width: int = 100) -> str:
    """The chains the torch-level rewrites looked at: made or refused, and why (wrapped)."""
    lines = []
    for n in notes:
        what = f"-> {n.made}" if n.made is not None else f"left as written: {n.reason}"
        where = f" ({n.where})" if n.where else ""
        lines.append(_wrap(f"{n.rewrite} at {n.node}{where}: {what}", width))
    return "\n".join(lines)


def format_breaks(breaks: Sequence[GraphBreak], width: int = 100) -> str:
    return "\n".join(_wrap(f"{b.where or '(no location)'}: {b.cause}", width) for b in breaks)


def format_relied(relied: Sequence[ReliedInput], width: int = 100) -> str:
    """The inputs relied on, grouped by what they hold and how they are checked (wrapped)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for r in relied:
        names = groups.setdefault((r.holds, r.check), [])
        if r.name not in names:
            names.append(r.name)
    return "\n".join(
        _wrap(f"{', '.join(names)}: {holds}; checked: {check}", width)
        for (holds, check), names in groups.items()
    )
