"""What the template lowerers share: operands read from memory and an op's arguments by name.

Owns: `operand(node, sg)` (input index, storage offset and strides of a GEMM or attention
operand that is a view of a subgraph input) and `bound_args(node)` (an aten call's arguments by
schema name, defaults filled in).
Must not: import the lowerers (lower.py dispatches to them, and they import this module).
"""

from __future__ import annotations

from typing import Any

import torch.fx as fx

from ..codegen.errors import Unsupported
from ..fx_passes import Subgraph
from .views import is_view_of_input, root_input


def operand(node: Any, sg: Subgraph) -> tuple[int, int, tuple[int, ...]]:
    """(input index, storage offset, strides) of a GEMM/attention operand read from memory."""
    inputs = set(sg.inputs)
    if not isinstance(node, fx.Node) or not is_view_of_input(node, inputs):
        raise Unsupported(
            f"operand {node} is computed inside the subgraph; templates read GEMM/attention "
            "operands from memory (no prologue fusion)"
        )
    root = root_input(node, inputs)
    val, base = node.meta["val"], root.meta["val"]
    if val.dtype != base.dtype:
        raise Unsupported("operand view changes dtype")
    return (
        sg.inputs.index(root),
        int(val.storage_offset()) - int(base.storage_offset()),
        tuple(int(s) for s in val.stride()),
    )


def bound_args(node: fx.Node) -> dict[str, Any]:
    """The op's arguments by schema name: defaults, then positional, then keyword ones."""
    schema = node.target._schema  # type: ignore[union-attr]
    bound = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}
    bound.update(dict(zip((a.name for a in schema.arguments), node.args, strict=False)))
    bound.update(node.kwargs)
    return bound
