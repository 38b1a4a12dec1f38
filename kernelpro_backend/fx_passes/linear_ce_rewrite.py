"""An LM head and its cross-entropy become one or two ops, before AOTAutograd.

`F.cross_entropy(linear(h, W, b)[shift].view(-1, V)[.float()], targets)` writes the [tokens,
vocab] logits, a float32 copy, a log-softmax saved for the backward and their gradients: at
vocabulary 32k and 8k tokens, gigabytes per step. Matched at the torch level (dynamo's graph),
from the loss back to the linear through views, `.contiguous()`, an upcast to float32 and
slices of the token dims (the shift of `logits[..., :-1, :]`), the chain becomes
- when nothing else reads the logits: `kernelpro::linear_cross_entropy` (ops/linear_ce.py),
  which walks the tokens in chunks and computes the loss and the gradients of h, W and b
  without the logits; under autocast its inputs are cast to autocast's dtype first, as
  autocast casts the linear's, so the GEMMs and the float32 loss are those of eager;
- when the logits have another user (a model returning them beside the loss, as Hugging Face's
  causal LMs do) or a shift the chunks cannot take: the linear stays, writing the logits once in
  its dtype, and the loss becomes `kernelpro::cross_entropy` (ops/cross_entropy.py), which reads
  them once in the forward (saving a float32 log-sum-exp per row) and writes their gradient once
  in the backward: no float32 copy, no log-softmax.
The labels' side (HF's `pad(labels, (0, 1), value=-100)[..., 1:]`) is any tensor; a division of
a "sum" loss (by `num_items_in_batch`) stays after the op.

Rewritten only when exact: the loss has no class weights, no label smoothing, class-index
targets and reduction "mean" or "sum", the logits are [tokens, vocab] from a linear whose
output dtype is its inputs' or autocast's, and the loss's dtype is float32 or the logits'.
Every cross-entropy looked at gets a `ChainNote` (what it became, or why not) for explain.

Owns: `rewrite_linear_cross_entropy(gm, notes) -> int` (chains rewritten), and
`drop_autograd_kernel(gm) -> int`: after AOTAutograd, the ops' calls go to their twins without
an autograd kernel (`*_inner`, the same body), since the graphs they sit in are already
differentiated and the autograd kernel's Python costs host time per step.
Must not: compute anything (the ops do) or import the ops' modules (the backend registers
them; this pass names them through torch.ops).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

from .torch_level import (
    ChainNote,
    arg,
    autocast_dtypes,
    example_value,
    finish_rewrite,
    note,
    replace_chain,
)

_LINEARS = {F.linear, torch._C._nn.linear}
_VIEWS = {"view", "reshape", "flatten"}
_CES = {F.cross_entropy}
NAME = "linear_cross_entropy"


def _dtype(node: Any) -> torch.dtype | None:
    v = example_value(node)
    return v.dtype if isinstance(v, torch.Tensor) else None


def _step(node: fx.Node) -> str | None:
    """What a node between the logits and the loss is: "view", "contiguous", "upcast" (to
    float32), "slice" (of dims before the last), or None (not a step the rewrite keeps)."""
    if node.op == "call_method" and node.target in _VIEWS:
        return "view"
    if node.op == "call_method" and node.target == "contiguous" and len(node.args) == 1:
        return "contiguous"
    if node.op == "call_method" and node.target == "float" and len(node.args) == 1:
        return "upcast"
    if node.op == "call_method" and node.target in ("to", "type"):
        to = node.args[1] if len(node.args) == 2 else node.kwargs.get("dtype")
        rest = len(node.args) + len(node.kwargs) == 2
        return "upcast" if to is torch.float32 and rest else None
    if node.op == "call_function" and node.target is operator.getitem:
        v = example_value(node.args[0])
        if isinstance(v, torch.Tensor) and _keeps_last(node.args[1], v.dim()):
            return "slice"
    return None


def _keeps_last(index: Any, ndim: int) -> bool:
    """Whether `index` is slices (and at most one `...`) that take the last dim whole."""
    items = index if isinstance(index, tuple) else (index,)
    if not all(isinstance(i, slice) or i is Ellipsis for i in items):
        return False
    if sum(i is Ellipsis for i in items) > 1:
        return False
    if Ellipsis in items:
        after = items[items.index(Ellipsis) + 1 :]
        return not after or after[-1] == slice(None)
    return len(items) < ndim or (len(items) == ndim and items[-1] == slice(None))


@dataclass
class _Chain:
    """The walk from the loss back to the logits' source."""

    source: fx.Node  # where the walk stopped: the linear, or logits with another user
    steps: list[fx.Node] = field(default_factory=list)  # source -> loss order
    linear: fx.Node | None = None  # the LM head, when reached
    shared: fx.Node | None = None  # the source when another node reads it too
    others: list[str] = field(default_factory=list)  # the nodes that read it too


def _walk(logits: fx.Node, ce: fx.Node) -> _Chain | str:
    node, user, steps = logits, ce, []
    while len(node.users) == 1 and _step(node) is not None and isinstance(node.args[0], fx.Node):
        steps.append(node)
        user, node = node, node.args[0]
    chain = _Chain(node, steps[::-1])
    if len(node.users) > 1:
        chain.shared = node
        chain.others = [
            "the graph's output (returned)" if u.op == "output" else u.name
            for u in node.users
            if u is not user
        ]
    # The LM head behind the shared logits (any number of users from here on).
    while node.target not in _LINEARS and _step(node) is not None:
        node = node.args[0]  # type: ignore[assignment]
        if not isinstance(node, fx.Node):
            return "the logits do not come from a linear layer"
    if node.target not in _LINEARS:
        return f"the logits do not come from a linear layer (they come from {node.name})"
    chain.linear = node
    return chain


def _ce_args(ce: fx.Node) -> tuple[fx.Node, fx.Node, int, str] | str:
    """(logits, target, ignore_index, reduction) or why the loss is not one the ops compute."""
    logits, target = arg(ce, 0, "input"), arg(ce, 1, "target")
    if arg(ce, 2, "weight") is not None:
        return "class weights"
    if arg(ce, 7, "label_smoothing", 0.0) != 0.0:
        return f"label smoothing {arg(ce, 7, 'label_smoothing')}"
    if arg(ce, 3, "size_average") is not None or arg(ce, 5, "reduce") is not None:
        return "legacy size_average/reduce arguments"
    ignore, reduction = arg(ce, 4, "ignore_index", -100), arg(ce, 6, "reduction", "mean")
    if not isinstance(logits, fx.Node) or not isinstance(target, fx.Node):
        return "logits or target not a tensor of the graph"
    if reduction not in ("mean", "sum"):
        return f"reduction {reduction!r}"
    if not isinstance(ignore, int):
        return "ignore_index is not a number"
    lv, tv = example_value(logits), example_value(target)
    if not isinstance(lv, torch.Tensor) or lv.dim() != 2 or not lv.dtype.is_floating_point:
        return "logits are not [tokens, vocab] floats"
    if not isinstance(tv, torch.Tensor) or tv.dtype.is_floating_point or tv.dim() != 1:
        return "targets are not class indices [tokens]"
    return logits, target, ignore, reduction


def _gemm_dtype(linear: fx.Node, amp: dict[str, torch.dtype]) -> torch.dtype | str:
    """The dtype the linear computes in: its inputs' without autocast, autocast's with it."""
    h, w, out = (_dtype(arg(linear, 0, "input")), _dtype(arg(linear, 1, "weight")), _dtype(linear))
    hv = example_value(arg(linear, 0, "input"))
    device = hv.device.type if isinstance(hv, torch.Tensor) else None
    if out is not None and device in amp and amp[device] == out:
        return out
    if out is not None and h == w == out and device not in amp:
        return out
    return f"the linear's output dtype {out} is neither its inputs' ({h}, {w}) nor autocast's"


def _chunkable(chain: _Chain, ce: fx.Node) -> str | None:
    """Why the chunked op cannot take the chain (None: it can)."""
    if chain.shared is not None:
        return f"the logits have another user: {', '.join(chain.others)}"
    if chain.source is not chain.linear:
        return "the logits reach the loss through more than views, slices and an upcast"
    kinds = [_step(s) for s in chain.steps]
    if "slice" in kinds and "view" in kinds[: max(i for i, k in enumerate(kinds) if k == "slice")]:
        return "a slice after a view (the chunks slice the hidden states)"
    wv = example_value(arg(chain.linear, 1, "weight"))
    lv = example_value(arg(ce, 0, "input"))
    if not isinstance(wv, torch.Tensor) or wv.dim() != 2 or lv.shape[1] != wv.shape[0]:
        return "the views do not keep the vocabulary as the last dim"
    return None


def rewrite_linear_cross_entropy(gm: fx.GraphModule, notes: list[ChainNote] | None = None) -> int:
    """Rewrite every exact LM-head + cross-entropy chain of `gm`; returns how many. Each
    cross-entropy looked at goes into `notes` with what it became or why not."""
    done = 0
    amp = autocast_dtypes(gm.graph)
    for ce in list(gm.graph.nodes):
        if ce.op != "call_function" or ce.target not in _CES:
            continue
        made, reason = _rewrite_one(gm.graph, ce, amp)
        note(notes, NAME, ce, made, reason)
        done += made is not None
    return finish_rewrite(gm, done, "LM head + cross-entropy chain(s) rewritten")


def _rewrite_one(
    graph: fx.Graph, ce: fx.Node, amp: dict[fx.Node, dict[str, torch.dtype]]
) -> tuple[str | None, str | None]:
    """(what the chain became, None) or (None, why it was left as written)."""
    args = _ce_args(ce)
    if isinstance(args, str):
        return None, args
    logits, target, ignore, reduction = args
    chain = _walk(logits, ce)
    if isinstance(chain, str):
        return None, chain
    assert chain.linear is not None
    gemm = _gemm_dtype(chain.linear, amp[chain.linear])
    if isinstance(gemm, str):
        return None, gemm
    loss_dtype, source_dtype = _dtype(ce), _dtype(chain.source)
    if loss_dtype not in (torch.float32, source_dtype):
        return None, f"the loss's dtype {loss_dtype} is neither float32 nor the logits'"
    why_not = _chunkable(chain, ce)
    if why_not is None:
        _chunked(graph, ce, chain, target, ignore, reduction, gemm)
        return "kernelpro::linear_cross_entropy (chunked: no logits)", None
    columns = _columns(chain.source)
    if columns < FUSED_MIN_COLUMNS:
        return None, (
            f"{why_not}, and its {columns} columns are fewer than {FUSED_MIN_COLUMNS}, where "
            "kernelpro::cross_entropy is not yet measured in a compiled step"
        )
    _fused(graph, ce, chain, target, ignore, reduction)
    return f"the linear, then kernelpro::cross_entropy ({why_not})", None


# kernelpro::cross_entropy's two row kernels on kept bf16 logits against Inductor's kernels for
# F.cross_entropy(logits.float()), forward + backward (one H100, 2026-12-06, BENCHMARKS.md
# "Loss on kept logits"): 1.34x at 8192 x 32000 and 8192 x 50257, 2.25x at 2048 x 50257, 1.78x
# at 8192 x 128256. The op called eagerly read 0.79-0.83x of Inductor at 32000-50257 columns,
# the time outside its two row kernels (not profiled). In a compiled step the rewrite is
# measured at 128256 only (Qwen2); below 65536 the gradient it writes must also be copied where
# pad_gemm pads an unaligned head (Inductor writes its own into the padded buffer), so it waits
# for the in-graph check (docs/gpu_runs/2026-12-06-unaligned-gemm/probe_loss.py, "kp-ce").
FUSED_MIN_COLUMNS = 65536


def _columns(logits: fx.Node) -> int:
    value = example_value(logits)
    return int(value.shape[-1]) if isinstance(value, torch.Tensor) and value.dim() else 0


def _chunked(
    graph: fx.Graph,
    ce: fx.Node,
    chain: _Chain,
    target: fx.Node,
    ignore: int,
    reduction: str,
    gemm: torch.dtype,
) -> None:
    linear = chain.linear
    assert linear is not None
    h, weight, bias = (arg(linear, 0, "input"), arg(linear, 1, "weight"), arg(linear, 2, "bias"))
    hv = example_value(h)
    # Which gradients the op computes: only those of inputs that want one (a frozen head or
    # hidden states from a no-grad trunk cost no GEMM).
    grad_x, grad_w, grad_b = (
        torch.is_grad_enabled() and isinstance(v, torch.Tensor) and v.requires_grad
        for v in (hv, example_value(weight), example_value(bias))
    )
    with graph.inserting_before(ce):
        rows = h
        for step in chain.steps:  # the shift's slices (before any view: _chunkable)
            if _step(step) == "slice":
                rows = graph.call_function(operator.getitem, (rows, step.args[1]))
        ins = [rows, weight, bias]
        for i, node in enumerate(ins):  # as autocast casts the linear's inputs
            if isinstance(node, fx.Node) and _dtype(node) != gemm:
                ins[i] = graph.call_method("to", (node, gemm))
        rows = graph.call_method("reshape", (ins[0], -1, hv.shape[-1]))
        flat = graph.call_method("reshape", (target, -1))
        op = graph.call_function(
            torch.ops.kernelpro.linear_cross_entropy.default,
            (rows, ins[1], ins[2], flat, ignore, reduction, _dtype(ce) == torch.float32,
             grad_x, grad_w, grad_b),
        )  # fmt: skip
        loss = graph.call_function(operator.getitem, (op, 0))
    replace_chain(graph, ce, loss, [*chain.steps[::-1], linear])


def _fused(
    graph: fx.Graph, ce: fx.Node, chain: _Chain, target: fx.Node, ignore: int, reduction: str
) -> None:
    """The loss on the logits as stored: the chain's steps replayed without its upcasts."""
    with graph.inserting_before(ce):
        logits: Any = chain.source
        for step in chain.steps:
            kind = _step(step)
            if kind == "view":  # a view may not apply where an upcast had made a copy
                logits = graph.call_method("reshape", (logits, *step.args[1:]), dict(step.kwargs))
            elif kind == "slice":
                logits = graph.call_function(operator.getitem, (logits, step.args[1]))
        op = graph.call_function(
            torch.ops.kernelpro.cross_entropy.default,
            (logits, target, ignore, reduction, _dtype(ce)),
        )
        loss = graph.call_function(operator.getitem, (op, 0))
    replace_chain(graph, ce, loss, chain.steps[::-1])


_TWINS = {
    "linear_cross_entropy": "linear_cross_entropy_inner",
    "cross_entropy": "cross_entropy_inner",
}


def drop_autograd_kernel(gm: fx.GraphModule) -> int:
    """Calls of `kernelpro::linear_cross_entropy` and `kernelpro::cross_entropy` in a graph
    AOTAutograd made (forward, backward or inference) retargeted to their twins without an
    autograd kernel: the same body and schema. The ones with the formula run a Python
    autograd kernel on every call even with grad mode off, as they are inside a compiled
    forward: host time on the step's critical path. Returns how many calls were retargeted."""
    twins = {
        getattr(torch.ops.kernelpro, outer).default: getattr(torch.ops.kernelpro, inner).default
        for outer, inner in _TWINS.items()
        if hasattr(torch.ops.kernelpro, outer)
    }
    done = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in twins:
            node.target = twins[node.target]
            done += 1
    if done:
        gm.recompile()
    return done
