"""An LM head and its cross-entropy become one chunked op, before AOTAutograd.

`F.cross_entropy(linear(h, W, b).view(-1, V)[.float()], targets)` writes the [tokens, vocab]
logits, saves them (or their softmax) for the backward and writes their gradient there again:
at vocabulary 32k and 8k tokens, gigabytes per step. Matched at the torch level (dynamo's
graph), the chain becomes `kernelpro::linear_cross_entropy` (linear_ce_op.py), which walks the
tokens in chunks and computes the loss and the gradients of h, W and b without the logits.

Rewritten only when exact: the logits feed nothing else, reach the loss only through views to
[tokens, vocab] and an upcast to float32, hidden states and weight share a dtype outside any
autocast region, and the loss has no class weights, no label smoothing and reduction "mean" or
"sum"; in a graph that needs no gradient, the op computes the loss alone.

Owns: `rewrite_linear_cross_entropy(gm) -> int` (chains rewritten), and
`drop_autograd_kernel(gm) -> int`: after AOTAutograd, the op's calls go to its twin without an
autograd kernel (`kernelpro::linear_cross_entropy_inner`, the same body), since the graphs it
sits in are already differentiated and the autograd kernel's Python costs host time per step.
Must not: compute anything (the op does) or import the op's module (the backend registers it;
this pass names it through torch.ops).
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx
import torch.nn.functional as F

from .torch_level import arg, example_value, finish_rewrite, replace_chain

_LINEARS = {F.linear, torch._C._nn.linear}
_VIEWS = {"view", "reshape", "flatten"}
_UPCASTS = {"float"}


def _single(node: fx.Node, user: fx.Node) -> bool:
    return len(node.users) == 1 and user in node.users


def _logits_source(node: fx.Node) -> tuple[fx.Node, bool, list[fx.Node]] | None:
    """(the linear, whether the logits were upcast, the nodes in between) or None."""
    between: list[fx.Node] = []
    upcast, user = False, None
    while True:
        if user is not None and not _single(node, user):
            return None
        if node.target in _LINEARS:
            return node, upcast, between
        if (
            node.op == "call_method"
            and node.target in _UPCASTS
            and len(node.args) == 1
            or node.op == "call_method"
            and node.target == "to"
            and node.args[1:] == (torch.float32,)
        ):
            upcast = True
        elif not (node.op == "call_method" and node.target in _VIEWS):
            return None
        between.append(node)
        source = node.args[0]
        if not isinstance(source, fx.Node):
            return None
        user, node = node, source


def _autocast(graph: fx.Graph) -> bool:
    """Whether the graph enters autocast (its linear would run in another dtype)."""
    return any(
        n.op == "call_function" and "autocast" in getattr(n.target, "__name__", "")
        for n in graph.nodes
    )


def _ce_args(ce: fx.Node) -> tuple[fx.Node, fx.Node, int, str] | None:
    logits, target = arg(ce, 0, "input"), arg(ce, 1, "target")
    if arg(ce, 2, "weight") is not None or arg(ce, 7, "label_smoothing", 0.0) != 0.0:
        return None
    if arg(ce, 3, "size_average") is not None or arg(ce, 5, "reduce") is not None:
        return None
    ignore, reduction = arg(ce, 4, "ignore_index", -100), arg(ce, 6, "reduction", "mean")
    if not isinstance(logits, fx.Node) or not isinstance(target, fx.Node):
        return None
    if reduction not in ("mean", "sum") or not isinstance(ignore, int):
        return None
    return logits, target, ignore, reduction


def rewrite_linear_cross_entropy(gm: fx.GraphModule) -> int:
    """Rewrite every exact LM-head + cross-entropy chain of `gm`; returns how many."""
    done = 0
    for ce in list(gm.graph.nodes):
        if ce.op != "call_function" or ce.target is not F.cross_entropy:
            continue
        args = _ce_args(ce)
        logits_val = example_value(args[0]) if args else None
        if args is None or not isinstance(logits_val, torch.Tensor) or logits_val.dim() != 2:
            continue
        logits, target, ignore, reduction = args
        if not _single(logits, ce):
            continue
        found = _logits_source(logits)
        if found is None:
            continue
        linear, upcast, between = found
        h, weight, bias = (
            arg(linear, 0, "input"),
            arg(linear, 1, "weight"),
            arg(linear, 2, "bias"),
        )
        hv, wv = example_value(h), example_value(weight)
        if not isinstance(hv, torch.Tensor) or not isinstance(wv, torch.Tensor) or wv.dim() != 2:
            continue
        if logits_val.shape[1] != wv.shape[0]:  # the views kept the vocabulary as the last dim
            continue
        if hv.dtype != wv.dtype or _autocast(gm.graph):  # the op computes in one dtype
            continue
        # Which gradients the op computes: only those of inputs that want one (a frozen head
        # or hidden states from a no-grad trunk cost no GEMM).
        grad_x, grad_w, grad_b = (
            torch.is_grad_enabled() and isinstance(v, torch.Tensor) and v.requires_grad
            for v in (hv, wv, example_value(bias))
        )
        graph = gm.graph
        with graph.inserting_before(ce):
            rows = graph.call_method("reshape", (h, -1, hv.shape[-1]))
            flat = graph.call_method("reshape", (target, -1))
            op = graph.call_function(
                torch.ops.kernelpro.linear_cross_entropy.default,
                (rows, weight, bias, flat, ignore, reduction, upcast, grad_x, grad_w, grad_b),
            )
            loss = graph.call_function(operator.getitem, (op, 0))
        replace_chain(graph, ce, loss, [*between, linear])
        done += 1
    return finish_rewrite(gm, done, "LM head + cross-entropy chain(s) rewritten to a chunked op")


def drop_autograd_kernel(gm: fx.GraphModule) -> int:
    """Calls of `kernelpro::linear_cross_entropy` in a graph AOTAutograd made (forward,
    backward or inference) retargeted to its twin `linear_cross_entropy_inner`: the same body
    and schema, no autograd kernel. The one with the formula runs a Python autograd kernel on
    every call even with grad mode off, as it is inside a compiled forward: host time on the
    step's critical path. Returns how many calls were retargeted."""
    outer = getattr(torch.ops.kernelpro, "linear_cross_entropy", None)
    if outer is None:
        return 0
    done = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is outer.default:
            node.target = torch.ops.kernelpro.linear_cross_entropy_inner.default
            done += 1
    if done:
        gm.recompile()
    return done
