"""Helpers of the torch-level rewrites (dynamo's graph, before AOTAutograd).

Owns: reading a node's example value and arguments by position or name, `input_name` (a graph
input as the user's model names it), `autocast_dtypes` (the autocast state each node runs
under: the caller's, changed by the graph's own autocast regions), `ChainNote` (a candidate
chain a rewrite made or refused, and why, for explain), `replace_chain`
(a chain's result replaced by a new node, the chain's now-unused nodes erased) and
`finish_rewrite` (a rewritten graph checked, recompiled and logged).
Must not: match anything itself (attention_rewrite.py and linear_ce_rewrite.py do).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

log = logging.getLogger("kernelpro")


def example_value(node: Any) -> Any:
    """What dynamo recorded for a node (a fake tensor, a size), or None."""
    return node.meta.get("example_value") if isinstance(node, fx.Node) else None


_KEY = re.compile(r"\._(?:modules|buffers|parameters)\['([^']*)'\]")


def input_name(node: fx.Node) -> str:
    """A placeholder as the model names it ("blocks.1.mask" for Dynamo's
    `L['self']._modules['blocks']._modules['1']._buffers['mask']`); else Dynamo's source name,
    else the placeholder's own name."""
    grapharg = node.meta.get("grapharg")
    source = getattr(getattr(grapharg, "source", None), "name", None)
    source = (
        source() if callable(source) else source
    )  # a method in older torch, a property in newer
    if not isinstance(source, str):
        return str(node.target)
    found = list(_KEY.finditer(source))
    if not found or source != "L['self']" + "".join(m.group(0) for m in found):
        return source  # not a plain attribute path of the compiled module
    return ".".join(m.group(1) for m in found)


def arg(node: fx.Node, i: int, name: str, default: Any = None) -> Any:
    """Argument `i` of a call, passed by position or by `name`."""
    return node.args[i] if len(node.args) > i else node.kwargs.get(name, default)


@dataclass(frozen=True)
class ChainNote:
    """A chain a torch-level rewrite looked at: what it became (`made`) or why it was left as
    written (`reason`), with the node it ends in and where the model's source wrote that."""

    rewrite: str  # "attention" | "attention_mask" | "attention_mask_layout" | ... | "pad_gemm"
    node: str  # the chain's last node, as dynamo named it
    made: str | None = None
    reason: str | None = None
    where: str = ""  # "modeling_llama.py:208", from the node's stack trace


def note(
    notes: list[ChainNote] | None, rewrite: str, node: fx.Node, made: str | None, reason: str | None
) -> None:
    """Append a ChainNote for `node` to `notes` (when the caller collects them)."""
    if notes is None:
        return
    trace = node.meta.get("stack_trace") or ""
    found = re.findall(r'File "([^"]+)", line (\d+)', trace)
    where = f"{found[-1][0].rsplit('/', 1)[-1]}:{found[-1][1]}" if found else ""
    notes.append(ChainNote(rewrite, node.name, made, reason, where))


_AUTOCAST_DEVICES = ("cuda", "cpu")


def autocast_dtypes(graph: fx.Graph) -> dict[fx.Node, dict[str, torch.dtype]]:
    """For each node, {device type: dtype} of the autocast regions it runs in: those the caller
    entered (dynamo guards on them, so they hold whenever the graph runs), then the graph's own
    `_enter_autocast` / `_exit_autocast` pairs."""
    ambient = {
        d: torch.get_autocast_dtype(d) for d in _AUTOCAST_DEVICES if torch.is_autocast_enabled(d)
    }
    stack, out = [ambient], {}
    for node in graph.nodes:
        if node.op == "call_function" and node.target is torch.amp.autocast_mode._enter_autocast:
            device, dtype, enabled = (list(node.args) + [None, None, True])[:3]
            state = dict(stack[-1])
            if enabled:
                state[device] = dtype if dtype is not None else torch.get_autocast_dtype(device)
            else:
                state.pop(device, None)
            stack.append(state)
        elif node.target is torch.amp.autocast_mode._exit_autocast and len(stack) > 1:
            stack.pop()
        out[node] = stack[-1]
    return out


def replace_chain(graph: fx.Graph, result: fx.Node, new: fx.Node, chain: Iterable[fx.Node]) -> None:
    """`new` (inserted before `result`) takes `result`'s place; the chain's nodes that nothing
    reads any more are erased, in the order given (from the result back to its inputs)."""
    new.meta = dict(result.meta)
    result.replace_all_uses_with(new)
    graph.erase_node(result)
    for node in chain:
        if not node.users and node.op != "placeholder":
            graph.erase_node(node)


def finish_rewrite(gm: fx.GraphModule, done: int, what: str) -> int:
    """After `done` rewrites of `what` ("hand-written attention chain(s) rewritten to SDPA"):
    the graph checked and recompiled, one log line; returns `done`."""
    if done:
        gm.graph.lint()
        gm.recompile()
        log.info("%d %s", done, what)
    return done
