"""How a GEMM spec's one output holds the GEMM's [M, N] result, for the kernels that compute
that result whole and store it as such (a vendor library's call, the CUTLASS GEMM).

Owns: `dense_output(spec)` (the output is the [M, N] result row after row, whatever its shape)
and `view_as_output(spec, value)` (the host expression of an [M, N] result as that output).
Must not: render kernels or choose which template computes a spec.
"""

from __future__ import annotations

from typing import Any


def dense_output(spec: Any) -> bool:
    """Whether the spec's one output holds the GEMM's M x N result row after row, whatever
    its shape: one plain store at element m * N + n of a contiguous tensor of M * N elements
    (a linear layer's [B, T, N] output is its [B * T, N] GEMM; a vector's [N] is one row).
    A library result of shape [M, N] is then the output through `view`."""
    if len(spec.stores) != 1:
        return False
    _, offset, index, predicate = spec.stores[0]
    shape, stride, _ = spec.outputs[0]
    m, n = int(spec.param("m")), int(spec.param("n"))
    index = [tuple(i) for i in index]
    rows = index == [(n, 0), (1, 1)] or (m == 1 and index == [(1, 1)])
    size, dense = 1, True
    for extent, step in reversed(list(zip(shape, stride, strict=True))):
        dense = dense and (extent == 1 or step == size)
        size *= extent
    return offset == 0 and not predicate and rows and dense and size == m * n


def view_as_output(spec: Any, value: str) -> str:
    """`value` (an [M, N] tensor expression) as the spec's output, for `dense_output` specs."""
    shape = tuple(spec.outputs[0][0])
    if shape == (spec.param("m"), spec.param("n")):
        return value
    return f"{value}.view({list(shape)})"
