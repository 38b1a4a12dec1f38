"""A subgraph with symbolic sizes, seen at one set of concrete sizes.

torch.compile makes sizes symbolic after the first shape change (`automatic_dynamic_shapes`), or
from the start under `dynamic=True`. Kernels are proved and cached per concrete shape, so a
symbolic subgraph is served by instances: its reference module traced again at the sizes of an
actual call, which gives an ordinary static `Subgraph` (its own key, inputs, outputs) plus how
its canonical inputs and outputs map onto the symbolic subgraph's calling convention.

Owns: `SymbolicKey` (the subgraph's structure with sizes as canonically named symbols — stable
across runs and processes), `hint_sizes` (the sizes the symbolic graph was traced at),
`concretize` (the static instance at given sizes) and `Instance`.
Must not: look kernels up or launch them (rewrite/dispatch.py and the providers do).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from .group import Group
from .keys import KEY_SCHEMA_VERSION, device_capability
from .ops import Role
from .subgraph import Subgraph, subgraph_of_group

# The sizes of one call: per canonical input, (shape, stride, dtype) of a tensor or an int.
TensorSizes = tuple[tuple[int, ...], tuple[int, ...], str]
CallSizes = tuple["TensorSizes | int", ...]


class ConcretizeError(Exception):
    """A symbolic subgraph cannot be instanced at these sizes (unbacked sizes, a trace that
    does not reproduce the subgraph); it keeps the fallback."""


@dataclasses.dataclass(frozen=True)
class SymbolicKey:
    """The structure of a symbolic subgraph: canonical text, inputs with their sizes written
    over canonically numbered symbols (k0, k1, ... in order of first appearance), device and
    precision. Two compiles of the same model make the same key, whatever dynamo named the
    symbols."""

    structure: str
    inputs: tuple[str, ...]
    device: str
    precision: str
    schema: int = KEY_SCHEMA_VERSION

    @property
    def digest(self) -> str:
        text = json.dumps(dataclasses.asdict(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    @classmethod
    def of(
        cls, text: str, inputs: Sequence[fx.Node], device: torch.device, precision: str
    ) -> SymbolicKey:
        names: dict[str, str] = {}

        def expr(value: Any) -> str:
            node = getattr(value, "node", None)
            for sym in _symbols(node):
                names.setdefault(sym, f"k{len(names)}")
            return _renamed(str(value), names)

        described = []
        for p in inputs:
            val = p.meta.get("val")
            if isinstance(val, torch.Tensor):
                shape = ",".join(expr(s) for s in val.shape)
                stride = ",".join(expr(s) for s in val.stride())
                described.append(f"[{shape}]/[{stride}]/{str(val.dtype).removeprefix('torch.')}")
            else:
                described.append(f"int:{expr(val)}")
        structure = hashlib.sha256(_renamed(text, names).encode()).hexdigest()
        return cls(structure, tuple(described), device_capability(device), precision)


def _symbols(node: Any) -> list[str]:
    expr = getattr(node, "expr", None)
    if expr is None:
        return []
    return sorted((str(s) for s in expr.free_symbols), key=lambda s: (len(s), s))


def _renamed(text: str, names: dict[str, str]) -> str:
    """`text` with every whole-word symbol name replaced by its canonical name."""
    if not names:
        return text
    pattern = re.compile(r"\b(" + "|".join(re.escape(s) for s in names) + r")\b")
    return pattern.sub(lambda m: names[m.group(1)], text)


def hint_sizes(inputs: Sequence[fx.Node]) -> CallSizes:
    """The sizes the symbolic graph was traced at (the call that made dynamo compile it)."""
    return sizes_at(inputs, {})


def free_symbols(inputs: Sequence[fx.Node]) -> dict[str, int]:
    """The symbols the inputs' sizes are written over, each with its hint."""
    found: dict[str, int] = {}
    for p in inputs:
        val = p.meta.get("val")
        values = [*val.shape, *val.stride()] if isinstance(val, torch.Tensor) else [val]
        for v in values:
            node = getattr(v, "node", None)
            for sym in getattr(getattr(node, "expr", None), "free_symbols", ()):
                env: Any = node.shape_env  # type: ignore[union-attr]
                # torch 2.13 renamed var_to_val (2.11 has only the old name).
                hints = getattr(env, "backed_var_to_val", None) or env.var_to_val
                hint = hints.get(sym)
                if hint is not None:
                    found[str(sym)] = int(hint)
    return found


def symbol_dims(inputs: Sequence[fx.Node]) -> list[tuple[int, int, Any]]:
    """(input, dimension, size expression) of every input dimension written over one symbol
    (dimension -1: an int input); their symbols' values at a call are its dynamic sizes."""
    found = []
    for i, p in enumerate(inputs):
        val = p.meta.get("val")
        dims = list(enumerate(val.shape)) if isinstance(val, torch.Tensor) else [(-1, val)]
        for d, v in dims:
            expr = getattr(getattr(v, "node", None), "expr", None)
            if expr is not None and len(expr.free_symbols) == 1:
                found.append((i, d, expr))
    return found


def dynamic_sizes(dims: Sequence[tuple[int, int, Any]], sizes: CallSizes) -> tuple[int, ...]:
    """The values at `sizes` of the symbols of the dimensions `symbol_dims` found (a bare
    symbol read off its dimension; `2*s0` solved for s0; one sympy cannot solve, such as
    Swin's `((s0//4) + Mod(...))//4`, left out), sorted, each once."""
    import sympy

    values: dict[Any, int] = {}
    for i, d, expr in sorted(dims, key=lambda t: not t[2].is_Symbol):  # bare symbols first
        (sym,) = expr.free_symbols
        if sym in values:
            continue
        s = sizes[i]
        size = int(s) if isinstance(s, int) else s[0][d]
        if expr.is_Symbol:
            values[sym] = size
            continue
        try:
            solved = sympy.solve(sympy.Eq(expr, size), sym)
        except (NotImplementedError, TypeError, ValueError):  # floor division, Mod: unsolved
            continue  # the symbol's value comes from another dimension, or is not a key's
        roots = [r for r in solved if r.is_integer and r > 0]
        if len(roots) == 1:
            values[sym] = int(roots[0])
    return tuple(sorted(set(values.values())))


def sizes_at(inputs: Sequence[fx.Node], values: dict[str, int]) -> CallSizes:
    """The call sizes of the inputs with their symbols set to `values` (by name; the others at
    their hints): a symbolic subgraph's sizes at another point of its range."""
    assign = {**free_symbols(inputs), **values}

    def at(v: Any) -> int:
        node = getattr(v, "node", None)
        expr = getattr(node, "expr", None)
        if expr is None:
            return int(v)
        subs = {sym: assign[str(sym)] for sym in expr.free_symbols if str(sym) in assign}
        size = expr.xreplace(subs)
        if getattr(size, "free_symbols", None):
            raise ConcretizeError(f"size {v} has no hint (a data-dependent size)")
        return int(size)

    sizes: list[TensorSizes | int] = []
    for p in inputs:
        val = p.meta.get("val")
        if isinstance(val, torch.Tensor):
            dtype = str(val.dtype).removeprefix("torch.")
            sizes.append(
                (tuple(at(d) for d in val.shape), tuple(at(d) for d in val.stride()), dtype)
            )
        elif isinstance(val, (int, torch.SymInt)):
            sizes.append(at(val))
        else:
            raise ConcretizeError(f"input {p.name} is neither a tensor nor an int")
    return tuple(sizes)


def call_sizes(args: Sequence[torch.Tensor | int]) -> CallSizes:
    """The sizes of an actual call, in the symbolic subgraph's canonical input order."""
    return tuple(
        (tuple(a.shape), tuple(a.stride()), str(a.dtype).removeprefix("torch."))
        if isinstance(a, torch.Tensor)
        else int(a)
        for a in args
    )


@dataclasses.dataclass
class Instance:
    """The static subgraph of one call's sizes and how it maps onto the symbolic one."""

    subgraph: Subgraph
    input_positions: list[int]  # static canonical input i is symbolic input input_positions[i]
    output_positions: list[int]  # symbolic output j is static output output_positions[j]


def symbolic_key(subgraph: Subgraph) -> SymbolicKey:
    """The key of a subgraph with symbolic sizes."""
    return SymbolicKey.of(subgraph.text, subgraph.inputs, subgraph.device, subgraph.precision)


def instance(subgraph: Subgraph, sizes: CallSizes) -> Instance:
    """The static subgraph of a symbolic one at `sizes` (raises ConcretizeError). Only while
    its nodes are in their graph (a rewrite erases those it replaces)."""
    return concretize(
        subgraph.module(),
        sizes,
        subgraph.kind,
        subgraph.graph,
        subgraph.precision,
        subgraph.device,
        symbolic_key(subgraph).digest,
    )


def concretize(
    module: fx.GraphModule,
    sizes: CallSizes,
    kind: str,
    graph_kind: str,
    precision: str,
    device: torch.device,
    family: str = "",
) -> Instance:
    """Trace `module` (a symbolic subgraph's reference) at `sizes` into a static subgraph, an
    instance of `family` (the symbolic key's digest)."""
    mode = FakeTensorMode()
    args: list[Any] = []
    with mode:
        for s in sizes:
            if isinstance(s, int):
                args.append(s)
            else:
                shape, stride, dtype = s
                args.append(
                    torch.empty_strided(shape, stride, dtype=getattr(torch, dtype), device=device)
                )
    try:
        # Inside the mode its tensors belong to: at compile time dynamo's tracing context
        # supplies one, at run time (the dispatcher, mid-step) nothing else does.
        with mode:
            gm = make_fx(module, tracing_mode="real")(*args)
    except Exception as e:  # the reference must trace at any size it is called with
        raise ConcretizeError(f"tracing at {sizes} failed ({type(e).__name__}: {e})") from e
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    members = [n for n in gm.graph.nodes if n.op == "call_function"]
    if not members:
        raise ConcretizeError("the subgraph traces to no ops")
    anchor = Role(kind) if kind in ("gemm", "conv") else None
    group = Group(nodes=members, mask=0, anchor=anchor, attention=kind == "attention")
    static = subgraph_of_group(group, graph_kind, precision)
    if static.symbolic:
        raise ConcretizeError("the traced subgraph still has symbolic sizes or tuple outputs")
    static.family = family
    returned = list(next(n for n in gm.graph.nodes if n.op == "output").args[0])
    if any(not isinstance(r, fx.Node) or r not in static.outputs for r in returned):
        raise ConcretizeError("an output of the traced subgraph is not one of its members")
    position = {p: i for i, p in enumerate(placeholders)}
    if any(p not in position for p in static.inputs):
        raise ConcretizeError("the traced subgraph reads a constant that is not an input")
    return Instance(
        subgraph=static,
        input_positions=[position[p] for p in static.inputs],
        output_positions=[static.outputs.index(r) for r in returned],
    )
