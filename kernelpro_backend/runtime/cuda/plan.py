"""A CUDA candidate's launch header resolved for one set of input shapes.

Owns: `resolve(spec, inputs) -> ResolvedLaunch`: output layouts, scratch sizes, and per kernel
launch the grid, block, dynamic shared memory and argument values, with the limits checked
(grid and block sizes, scalar ranges, known tensor names). Pure Python over tensor metadata, so
the driver can cache one resolution per input signature and tests run without a GPU.
Must not: parse the header (source.py) or touch a device (driver.py).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from .source import (
    DTYPES,
    MAX_BLOCK_THREADS,
    MAX_GRID,
    SCALAR_TYPES,
    Expr,
    LaunchSpec,
    LaunchSpecError,
    LaunchStep,
    OutputSpec,
    TensorMeta,
)


@dataclasses.dataclass(frozen=True)
class ResolvedArg:
    tensor: str | None  # "in0" / "out0" / "tmp0" (a device pointer), or None for a scalar
    ctype: str | None = None  # "i32", "f32", ... for a scalar
    value: int | float | None = None


@dataclasses.dataclass(frozen=True)
class ResolvedStep:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    args: tuple[ResolvedArg, ...]


@dataclasses.dataclass(frozen=True)
class ResolvedOutput:
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str
    zeros: bool


@dataclasses.dataclass(frozen=True)
class ResolvedLaunch:
    outputs: tuple[ResolvedOutput, ...]
    scratch: tuple[tuple[int, bool], ...]  # (bytes, zeros)
    steps: tuple[ResolvedStep, ...]


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, running = [], 1
    for size in reversed(shape):
        strides.append(running)
        running *= max(size, 1)
    return tuple(reversed(strides))


def resolve(spec: LaunchSpec, inputs: Sequence[TensorMeta]) -> ResolvedLaunch:
    """Concrete launch values for these inputs; raises LaunchSpecError saying what is wrong."""
    env: dict[str, TensorMeta] = {f"in{k}": meta for k, meta in enumerate(inputs)}
    outputs = tuple(_output(o, env, k) for k, o in enumerate(spec.outputs))
    for k, o in enumerate(outputs):
        env[f"out{k}"] = TensorMeta(o.shape, o.stride, o.dtype)
    scratch = []
    for k, (size, zeros) in enumerate(spec.scratch):
        nbytes = size.integer(env, f"scratch[{k}].bytes")
        if nbytes < 0:
            raise LaunchSpecError(f"scratch[{k}] asks for {nbytes} bytes")
        scratch.append((nbytes, zeros))
    names = set(env) | {f"tmp{k}" for k in range(len(scratch))}
    steps = tuple(_step(step, env, names, i) for i, step in enumerate(spec.launches))
    return ResolvedLaunch(outputs, tuple(scratch), steps)


def _output(spec: OutputSpec, env: dict[str, TensorMeta], k: int) -> ResolvedOutput:
    what = f"outputs[{k}]"
    if isinstance(spec.shape, Expr):
        raw = spec.shape.evaluate(env)
        shape = tuple(raw) if isinstance(raw, tuple) else None
        if shape is None:
            raise LaunchSpecError(f"{what}.shape {spec.shape.text!r} is {raw!r}, not a shape")
    else:
        shape = tuple(e.integer(env, f"{what}.shape") for e in spec.shape)
    if any(not isinstance(s, int) or s < 0 for s in shape):
        raise LaunchSpecError(f"{what}.shape is {shape}: sizes must be integers >= 0")
    dtype = spec.dtype if isinstance(spec.dtype, str) else str(spec.dtype.evaluate(env))
    if dtype not in DTYPES:
        raise LaunchSpecError(f"{what}.dtype is {dtype!r}; known: {', '.join(sorted(DTYPES))}")
    if spec.stride is None:
        stride = contiguous_strides(shape)
    else:
        stride = tuple(e.integer(env, f"{what}.stride") for e in spec.stride)
        if len(stride) != len(shape):
            raise LaunchSpecError(f"{what} has {len(shape)} dims but {len(stride)} strides")
    return ResolvedOutput(shape, stride, dtype, spec.zeros)


def _dims(exprs: tuple[Expr, ...], env: dict[str, TensorMeta], what: str) -> tuple[int, int, int]:
    values = [e.integer(env, what) for e in exprs] + [1] * (3 - len(exprs))
    if any(v < 1 for v in values):
        raise LaunchSpecError(f"{what} is {tuple(values)}: every dimension must be >= 1")
    return values[0], values[1], values[2]


def _step(step: LaunchStep, env: dict[str, TensorMeta], names: set[str], i: int) -> ResolvedStep:
    what = f"launch {i} ({step.kernel})"
    grid = _dims(step.grid, env, f"{what} grid")
    block = _dims(step.block, env, f"{what} block")
    for axis, (size, limit) in enumerate(zip(grid, MAX_GRID, strict=True)):
        if size > limit:
            raise LaunchSpecError(f"{what}: grid[{axis}] = {size} exceeds the limit {limit}")
    if math.prod(block) > MAX_BLOCK_THREADS:
        raise LaunchSpecError(
            f"{what}: block {block} has {math.prod(block)} threads, more than "
            f"{MAX_BLOCK_THREADS}; use fewer threads per block"
        )
    smem = step.smem.integer(env, f"{what} smem")
    if smem < 0:
        raise LaunchSpecError(f"{what}: smem is {smem} bytes")
    args = tuple(
        _arg(a.tensor, a.ctype, a.expr, env, names, f"{what} arg {j}")
        for j, a in enumerate(step.args)
    )
    return ResolvedStep(step.kernel, grid, block, smem, args)


def _arg(
    tensor: str | None,
    ctype: str | None,
    expr: Expr | None,
    env: dict[str, TensorMeta],
    names: set[str],
    what: str,
) -> ResolvedArg:
    if tensor is not None:
        if tensor not in names:
            known = ", ".join(sorted(names))
            raise LaunchSpecError(f"{what}: no tensor named {tensor!r} (there are: {known})")
        return ResolvedArg(tensor)
    assert ctype is not None and expr is not None
    value = expr.evaluate(env)
    limits = SCALAR_TYPES[ctype]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise LaunchSpecError(f"{what}: {expr.text!r} is {value!r}, not a number")
    if limits is None:
        return ResolvedArg(None, ctype, float(value))
    if not isinstance(value, int) or not limits[0] <= value < limits[1]:
        raise LaunchSpecError(f"{what}: {expr.text!r} = {value!r} does not fit {ctype}")
    return ResolvedArg(None, ctype, value)
