"""Kernels for subgraphs with symbolic sizes: a shape dispatcher behind one opaque op.

After a shape change torch.compile recompiles a graph with symbolic sizes; kernels are proved
and cached per concrete shape. A symbolic subgraph whose sizes at compile time (its hints) have a
kernel is replaced by `kernelpro::dispatch(id, tensors, sizes)`. At run time its dispatcher
reads the call's sizes, traces the subgraph's instance at those sizes once
(fx_passes/concrete.py) and asks the provider for that instance's kernel — a cache hit, or a
search under search="on-miss" — exactly as a static subgraph of those sizes would be; sizes with
no kernel run the miss path (the subgraph's reference, compiled once by Inductor with dynamic
sizes, for every such size) and are recorded in the miss manifest by the provider. Each size is
routed once; later calls of the same sizes cost a dictionary lookup.

Owns: the `kernelpro::dispatch` custom op (its fake implementation runs the symbolic reference
on fake tensors, so output sizes follow the inputs' symbols), `ShapeDispatcher`, its routes and
call counts, and the process registry of dispatchers.
Must not: search, cache or compile kernels (providers do), or edit graphs (graph.py does).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..fx_passes import Subgraph
from ..fx_passes.concrete import (
    CallSizes,
    ConcretizeError,
    call_sizes,
    concretize,
    dynamic_sizes,
    symbol_dims,
    symbolic_key,
)
from ..ops.fast_op import fast_op
from .providers import Kernel, Registry, TensorMeta, conform

log = logging.getLogger("kernelpro")

# Finds a kernel for a static instance (KernelFinder.find_dynamic), or None.
Finder = Callable[[Subgraph], "Kernel | None"]


@dataclasses.dataclass
class Route:
    """What one set of sizes runs: a kernel with its instance's input/output maps, or the miss
    path (kernel None)."""

    kernel: Kernel | None
    input_positions: list[int] = dataclasses.field(default_factory=list)
    output_positions: list[int] = dataclasses.field(default_factory=list)
    outputs: list[TensorMeta] = dataclasses.field(default_factory=list)  # symbolic order
    miss_fn: Callable[..., Any] | None = None  # the miss path, chosen on the first miss call
    calls: int = 0


class ShapeDispatcher:
    """Routes each call of one symbolic subgraph to the kernel of its sizes, or the miss path."""

    def __init__(self, subgraph: Subgraph, find: Finder, fallback: str) -> None:
        # Only what the subgraph was is kept: the rewrite erases its nodes from the graph.
        self.find = find
        self.fallback = fallback
        self.reference = subgraph.module()
        self.pattern = subgraph.pattern
        self.graph_kind = subgraph.graph
        self.kind = subgraph.kind
        self.precision = subgraph.precision
        self.device = subgraph.device
        self.n_inputs = len(subgraph.inputs)
        self.family = symbolic_key(subgraph).digest
        self.tensor_positions = [
            i for i, p in enumerate(subgraph.inputs) if isinstance(p.meta.get("val"), torch.Tensor)
        ]
        self.size_positions = [
            i for i in range(len(subgraph.inputs)) if i not in self.tensor_positions
        ]
        self.symbol_dims = symbol_dims(subgraph.inputs)
        self.routes: dict[CallSizes, Route] = {}
        self._lock = threading.Lock()
        self._generic: Callable[..., Any] | None = None  # the miss path compiled once

    # -- routing ---------------------------------------------------------------------------
    def route(self, sizes: CallSizes) -> Route:
        """The route of `sizes`, made (traced, looked up, maybe searched) on first sight."""
        found = self.routes.get(sizes)
        if found is not None:
            return found
        with self._lock:
            found = self.routes.get(sizes)
            if found is None:
                found = self._make_route(sizes)
                self.routes[sizes] = found
        return found

    def _make_route(self, sizes: CallSizes) -> Route:
        try:
            instance = concretize(
                self.reference,
                sizes,
                self.kind,
                self.graph_kind,
                self.precision,
                self.device,
                self.family,
            )
        except ConcretizeError as e:
            log.warning(
                "%s %s at sizes %s has no static instance (%s); it runs the fallback "
                "at these sizes",
                self.graph_kind,
                self.pattern,
                _short(sizes),
                e,
            )
            return Route(kernel=None)
        static: Subgraph = instance.subgraph
        static.dynamic_sizes = dynamic_sizes(self.symbol_dims, sizes)
        kernel = self.find(static)
        metas = static.output_meta
        return Route(
            kernel=kernel,
            input_positions=instance.input_positions,
            output_positions=instance.output_positions,
            outputs=[metas[j] for j in instance.output_positions],
        )

    # -- running ---------------------------------------------------------------------------
    def arguments(self, tensors: Sequence[torch.Tensor], sizes: Sequence[Any]) -> list[Any]:
        """The call's arguments in the symbolic subgraph's canonical input order (sizes as
        given: ints at run time, SymInts under fake tensors, never int()ed there)."""
        args: list[Any] = [0] * self.n_inputs
        for i, t in zip(self.tensor_positions, tensors, strict=True):
            args[i] = t
        for i, s in zip(self.size_positions, sizes, strict=True):
            args[i] = s
        return args

    def __call__(self, tensors: Sequence[torch.Tensor], sizes: Sequence[int]) -> list[torch.Tensor]:
        args = self.arguments(tensors, sizes)
        route = self.route(call_sizes(args))
        route.calls += 1
        taken = {t.untyped_storage().data_ptr() for t in tensors}
        if route.kernel is None:
            outs = self._miss(route, args)
            metas = [_meta(o) for o in outs]
            return [conform(o, m, taken) for o, m in zip(outs, metas, strict=True)]
        outs = route.kernel(*[args[i] for i in route.input_positions])
        ordered = [outs[j] for j in route.output_positions]
        return [conform(o, m, taken) for o, m in zip(ordered, route.outputs, strict=True)]

    def _miss(self, route: Route, args: list[Any]) -> Sequence[torch.Tensor]:
        """The miss path: under the Inductor fallback, the symbolic subgraph compiled once with
        dynamic sizes (size-generic kernels, as in Inductor's own dynamic graph: no compile per
        size, so a loop over many sizes stays compiled), else the subgraph's ATen ops. A
        compile that fails is logged and the ATen ops run for those sizes."""
        if route.miss_fn is not None:
            return route.miss_fn(*args)  # type: ignore[no-any-return]
        if self.fallback != "inductor":
            route.miss_fn = self.reference
            return route.miss_fn(*args)  # type: ignore[no-any-return]
        if self._generic is None:
            self._generic = torch.compile(self.reference, dynamic=True)
        try:
            outs = self._generic(*args)  # a size's first call may (re)compile
        except Exception as e:
            log.warning(
                "Inductor could not compile the fallback of %s %s at sizes %s "
                "(%s: %s); running its ATen ops there",
                self.graph_kind,
                self.pattern,
                _short(call_sizes(args)),
                type(e).__name__,
                str(e)[:300],
            )
            route.miss_fn = self.reference
            return route.miss_fn(*args)  # type: ignore[no-any-return]
        route.miss_fn = self._generic
        return outs  # type: ignore[no-any-return]

    def stats(self) -> dict[str, int]:
        """Calls served by kernels and by the miss path, and sizes seen."""
        kernel = sum(r.calls for r in self.routes.values() if r.kernel is not None)
        miss = sum(r.calls for r in self.routes.values() if r.kernel is None)
        return {"kernel_calls": kernel, "miss_calls": miss, "sizes": len(self.routes)}


def _meta(t: torch.Tensor) -> TensorMeta:
    return (tuple(t.shape), tuple(t.stride()), str(t.dtype).removeprefix("torch."))


def _short(sizes: CallSizes) -> str:
    return ", ".join(
        str(s) if isinstance(s, int) else "x".join(map(str, s[0])) or "scalar" for s in sizes
    )


# Dispatch id (the symbolic key's digest) -> dispatcher.
DISPATCHERS: Registry[ShapeDispatcher] = Registry(
    "dispatcher", "recompile the model with torch.compile(..., backend='kernelpro')"
)


def dispatch_stats() -> dict[str, int]:
    """Totals over every dispatcher of this process (the bench's share of calls served)."""
    total = {"dispatchers": 0, "kernel_calls": 0, "miss_calls": 0, "sizes": 0}
    for _, d in DISPATCHERS.items():
        total["dispatchers"] += 1
        for name, value in d.stats().items():
            total[name] += value
    return total


@fast_op("kernelpro::dispatch")
def dispatch(dispatch_id: str, tensors: list[torch.Tensor], sizes: list[int]) -> list[torch.Tensor]:
    return DISPATCHERS.get(dispatch_id)(tensors, sizes)


@dispatch.register_fake
def _dispatch_fake(
    dispatch_id: str, tensors: list[torch.Tensor], sizes: list[int]
) -> list[torch.Tensor]:
    d = DISPATCHERS.get(dispatch_id)
    outs = d.reference(*d.arguments(tensors, sizes))
    return [torch.empty_strided(o.shape, o.stride(), dtype=o.dtype, device=o.device) for o in outs]
