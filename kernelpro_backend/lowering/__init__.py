"""Lowering: a partitioned fx `Subgraph` to a `KernelSpec` with default knobs.

Public API: `lower(subgraph)` (raises `codegen.Unsupported` for what no template covers).
Owns: everything that reads fx nodes on the way to a spec: index maps of views and broadcasts
(maps.py), the op program of an epilogue or row kernel (program.py), and the per-template
lowerers (lower.py dispatches; lower_attention.py, lower_attention_bwd.py; their shared operand
reading in operands.py).
Must not: render, build, measure or cache; codegen/ must not import this package (it knows
`KernelSpec`, not fx).
"""

from .lower import lower

__all__ = ["lower"]
