"""Helpers of the torch-level rewrites (dynamo's graph, before AOTAutograd).

Owns: reading a node's example value and arguments by position or name, `input_name` (a graph
input as the user's model names it), `replace_chain`
(a chain's result replaced by a new node, the chain's now-unused nodes erased) and
`finish_rewrite` (a rewritten graph checked, recompiled and logged).
Must not: match anything itself (attention_rewrite.py and linear_ce_rewrite.py do).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any

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
        log.info("kernelpro: %d %s", done, what)
    return done
