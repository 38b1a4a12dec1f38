"""A gradient accumulated into a small table by many indices, computed as a one-hot matmul.

An embedding's backward reaches Inductor as `_unsafe_masked_index_put_accumulate` into a zero
table,
which Inductor lowers to one atomic add per value. When the table has few rows and each row is
hit by many indices, those atomics serialize on a few addresses: Hugging Face's T5 looks its
relative-position bias up from 32 buckets for every (query, key) pair, so its gradient adds
1024 x 1024 x 12 values into 32 x 12 addresses; under Inductor on an H100 (T5-base, bf16
autocast, 2026-12-07) that one kernel took about 5 ms of an 84 ms step. BERT's two token types
are the same shape of problem.

Here such an accumulate becomes `one_hot(index)^T @ values`, a [rows, N] x [N, width] GEMM cut
along N into up to 256 batches whose results are summed (what the atomics did one add at a
time): each value read once, the one-hot written and read once. Its entries are 0 or 1, so
every product is exact and only the order of the float32-accumulated sums differs (the
atomics' order is not fixed either). Float32 values go in as two columns each, their top 10
mantissa bits and the rest: a TF32 GEMM (where the user allows TF32 for matmuls, now or later)
reads the first exactly and the second to 2^-11 of itself, 2^-21 of the value; IEEE reads both
exactly. The user's accumulate is not a matmul, so it must not take TF32's rounding.
Masked-out values read as 0 and indices are clamped and wrapped as the decomposition does.
Made only on the devices named (CUDA, where the atomics are the cost).

Owns: `one_hot_table_grads(gm, devices) -> int` (accumulates replaced), `MAX_ROWS`, `MIN_HITS`.
Must not: touch an accumulate whose table is not a fresh zero tensor, or one with few hits a row.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch
import torch.fx as fx

from .ops import tensor_value

log = logging.getLogger("kernelpro")

NAME = "small_table_grads"
MAX_ROWS = 64  # the one-hot costs rows x the index count: small tables only
MIN_HITS = 256  # average indices a row: below it the atomics barely contend
PART = 4096  # indices a batch of the one-hot GEMM at least
TF32_MASK = -8192  # a float32's bits but its low 13 mantissa bits: TF32's 10 remain

_aten = torch.ops.aten
_MASKED = _aten._unsafe_masked_index_put_accumulate.default
# Only this op: `index_put` with accumulate (what `_unsafe_index_put` also decomposes to) has
# its indices' bounds checked by Inductor, which the one-hot would not do.


def _static(t: torch.Tensor) -> bool:
    return all(isinstance(s, int) for s in t.shape)


def _zero_table(node: Any) -> torch.Tensor | None:
    """The value of `node` if it is a fresh table of zeros (`aten.full(shape, 0)`), else None."""
    if not isinstance(node, fx.Node) or node.target is not _aten.full.default:
        return None
    fill = node.args[1] if len(node.args) > 1 else None
    table = tensor_value(node)
    if fill not in (0, 0.0, False) or not isinstance(table, torch.Tensor):
        return None
    return table


def _accumulate(node: fx.Node) -> tuple[fx.Node, fx.Node, fx.Node, fx.Node] | None:
    """(table, mask, index, values) of a masked accumulate, else None."""
    if node.target is not _MASKED:
        return None
    table, mask, indices, values = node.args[:4]
    if not isinstance(indices, (list, tuple)) or len(indices) != 1:
        return None
    index = indices[0]
    if not all(isinstance(n, fx.Node) for n in (table, mask, index, values)):
        return None
    return table, mask, index, values  # type: ignore[return-value]


def _refusal(
    table: torch.Tensor | None, mask: Any, index: Any, values: Any, devices: tuple[str, ...]
) -> str | None:
    """Why this accumulate stays as written, or None when the one-hot form applies."""
    if table is None or not isinstance(index, torch.Tensor) or not isinstance(values, torch.Tensor):
        return "not an accumulate into a fresh zero table"
    if table.device.type not in devices:
        return f"on {table.device.type}"
    if not (_static(table) and _static(index) and _static(values)) or table.dim() == 0:
        return "symbolic shapes"
    if index.dtype not in (torch.int64, torch.int32) or values.dtype != table.dtype:
        return "index or value dtypes"
    if tuple(values.shape) != tuple(index.shape) + tuple(table.shape[1:]):
        return "values not one row per index"
    if not isinstance(mask, torch.Tensor) or (
        mask.dtype != torch.bool or torch.broadcast_shapes(mask.shape, values.shape) != values.shape
    ):
        return "mask does not broadcast to the values"
    if table.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return f"{table.dtype} table"
    rows, hits = table.shape[0], index.numel()
    if rows > MAX_ROWS or hits < MIN_HITS * rows:
        return f"{rows} rows, {hits} indices: too large a table or too few hits a row"
    return None


def _batches(n: int) -> int:
    """How many batches the GEMM's long dimension is cut into: the most (a power of two, at
    most 256) that leaves each at least `PART` indices, so the GPU fills without relying on
    the GEMM library's split-K for a [rows, n] x [n, width] shape."""
    parts = 1
    while parts < 256 and n % (parts * 2) == 0 and n // (parts * 2) >= PART:
        parts *= 2
    return parts


def _one_hot_sum(rows: int, shape: list[int]) -> Any:
    """The replacement, traced on the graph's fake values: indices clamped and wrapped and
    masked-out values zeroed as the op's decomposition does, then the one-hot GEMM."""

    def fn(mask: torch.Tensor, index: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        index = index.clamp(-rows, rows - 1)
        index = torch.where(index < 0, index + rows, index)
        values = values.masked_fill(~mask, 0)
        n = index.numel()
        parts = _batches(n)
        width = math.prod(shape[1:])
        hot = index.reshape(parts, n // parts, 1) == torch.arange(rows, device=index.device)
        values = values.reshape(parts, n // parts, width)
        split = values.dtype == torch.float32
        if split:  # exact whether or not TF32 is allowed (see the module's docstring)
            high = (values.view(torch.int32) & TF32_MASK).view(torch.float32)
            values = torch.cat([high, values - high], dim=-1)
        flat = (hot.to(values.dtype).transpose(1, 2) @ values).sum(0)
        if split:
            flat = flat[:, :width] + flat[:, width:]
        return flat.reshape(shape)

    return fn


def _trace(fn: Any, inputs: list[torch.Tensor]) -> fx.GraphModule:
    from torch._guards import detect_fake_mode
    from torch._inductor.decomposition import select_decomp_table
    from torch.fx.experimental.proxy_tensor import make_fx

    mode = detect_fake_mode(inputs)
    if mode is None:
        raise ValueError("the graph's values carry no fake mode")
    with mode:
        return make_fx(fn, decomposition_table=select_decomp_table())(*inputs)


def _splice(
    graph: fx.Graph, node: fx.Node, table: fx.Node, traced: fx.GraphModule, args: list[fx.Node]
) -> None:
    """`node` replaced by a copy of `traced` on `args`; its zero `table` erased if unused."""
    env: dict[fx.Node, Any] = {}
    places = [n for n in traced.graph.nodes if n.op == "placeholder"]
    env.update(zip(places, args, strict=True))
    with graph.inserting_before(node):
        for n in traced.graph.nodes:
            if n.op == "placeholder":
                continue
            if n.op == "output":
                result = env[n.args[0]]
                break
            env[n] = graph.node_copy(n, lambda a: env[a])
            if "stack_trace" in node.meta:
                env[n].meta["stack_trace"] = node.meta["stack_trace"]
    node.replace_all_uses_with(result)
    graph.erase_node(node)
    if not table.users:
        graph.erase_node(table)


def one_hot_table_grads(gm: fx.GraphModule, devices: tuple[str, ...] = ("cuda",)) -> int:
    graph = gm.graph
    done = 0
    for node in list(graph.nodes):
        parts = _accumulate(node) if node.op == "call_function" else None
        if parts is None:
            continue
        table_node, mask, index, values = parts
        table = _zero_table(table_node)
        args = [mask, index, values]
        vals = [tensor_value(a) for a in args]
        why = _refusal(table, vals[0], vals[1], vals[2], devices)
        if why is not None or table is None:
            log.debug("%s left as written: %s", node.name, why)
            continue
        fn = _one_hot_sum(table.shape[0], list(table.shape))
        try:
            traced = _trace(fn, [v for v in vals if v is not None])  # all three (_refusal)
        except Exception as e:  # a form the tracer refuses: the atomics still work
            log.warning("%s kept its atomics: tracing failed (%s)", node.name, e)
            continue
        _splice(graph, node, table_node, traced, args)
        done += 1
    if done:
        gm.recompile()
        log.info("%d small-table gradient(s) as one-hot GEMMs", done)
    return done
