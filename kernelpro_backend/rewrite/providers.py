"""The kernel-provider interface: who may supply a kernel for a subgraph.

Owns: the `Kernel`, `KernelProvider` and `MeasuredProvider` protocols, `IsolatedMs` (a kernel's
figures alone), `isolated_figures`, `conform` (a kernel's output made to the
promised layout, sharing no storage), `Registry` (the id -> entry map the custom ops read)
and the trivial providers.
Must not: search, cache or compile (the search and cache providers live in their packages).

A kernel is called with the subgraph's inputs in canonical order (`Subgraph.inputs`) and
returns its outputs in canonical order (`Subgraph.outputs`), as fresh tensors.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar, runtime_checkable

import torch

from ..fx_passes import Subgraph


@runtime_checkable
class Kernel(Protocol):
    """A callable that computes one subgraph."""

    name: str

    def __call__(self, *inputs: torch.Tensor) -> Sequence[torch.Tensor]: ...


@runtime_checkable
class KernelProvider(Protocol):
    """Returns a kernel for a subgraph, or None to leave it to the fallback. A provider may
    also have `prepare(subgraphs)`, called with all of a graph's subgraphs before their
    `find`s (graph.rewrite_graph), to decide for them together, and `prestart()`, called by
    a warm-up before it traces the model, to start what its searches will need."""

    def find(self, subgraph: Subgraph) -> Kernel | None: ...


@dataclasses.dataclass(frozen=True)
class IsolatedMs:
    """A kernel's time and its fallback's, each measured alone in a worker (ms), for the subgraph
    it was served for. `tentative`: it was served although it did not beat the fallback clearly
    alone (a near tie, tuner/eager.py's NEAR_TIE), for the in-context verdict to decide
    (rewrite/judged.py); a graph that is not judged must not install it."""

    kernel_ms: float
    fallback_ms: float
    tentative: bool = False

    @property
    def gain(self) -> float:
        """The share of the fallback's time the kernel saved alone (negative: it was slower)."""
        return 1.0 - self.kernel_ms / self.fallback_ms if self.fallback_ms > 0 else 0.0

    def as_list(self) -> list[float]:
        """[kernel ms, fallback ms], as reports write it."""
        return [self.kernel_ms, self.fallback_ms]


@runtime_checkable
class MeasuredProvider(Protocol):
    """A provider that knows what the kernels it serves measured alone: the in-context verdict
    orders and keeps kernels by it (rewrite/verdict_plan.py) and the regret report prints it
    (bench/tables.py). A separate protocol, so a provider that only finds kernels still is a
    `KernelProvider`."""

    def isolated_ms(self, subgraph: Subgraph) -> IsolatedMs | None: ...


def isolated_figures(provider: KernelProvider, subgraph: Subgraph) -> IsolatedMs | None:
    """The isolated figures of the kernel `provider` serves for `subgraph`, or None where the
    provider has none (or is no MeasuredProvider)."""
    return provider.isolated_ms(subgraph) if isinstance(provider, MeasuredProvider) else None


TensorMeta = tuple[tuple[int, ...], tuple[int, ...], str]  # (shape, stride, dtype name)
T = TypeVar("T")


def conform(out: torch.Tensor, meta: TensorMeta, taken: set[int]) -> torch.Tensor:
    """Return `out` with exactly the promised shape, strides and dtype, sharing storage with no
    input and no other output (`taken`: storages already used; the custom-op contract)."""
    shape, stride, dtype_name = meta
    dtype = getattr(torch, dtype_name)
    if tuple(out.shape) != shape or out.dtype != dtype:
        raise RuntimeError(
            f"kernel returned shape {tuple(out.shape)} {out.dtype}, expected {shape} {dtype}"
        )
    ptr = out.untyped_storage().data_ptr()
    if tuple(out.stride()) == stride and ptr not in taken:
        taken.add(ptr)
        return out
    fresh = torch.empty_strided(shape, stride, dtype=dtype, device=out.device)
    fresh.copy_(out)
    taken.add(fresh.untyped_storage().data_ptr())
    return fresh


class Registry(Generic[T]):
    """Id -> entry, filled while compiling and read by the custom ops at run time. Ids are
    deterministic (keys), so a graph handed back by Inductor's FX cache finds its entries once
    the backend has registered them during this process's own compile."""

    def __init__(self, what: str, missing_hint: str) -> None:
        self._entries: dict[str, T] = {}
        self._lock = threading.Lock()
        self._what, self._hint = what, missing_hint

    def register(self, entry_id: str, entry: T) -> None:
        with self._lock:
            self._entries[entry_id] = entry

    def get(self, entry_id: str) -> T:
        try:
            return self._entries[entry_id]
        except KeyError:
            raise RuntimeError(
                f"kernelpro {self._what} {entry_id!r} is not registered in this process; "
                f"{self._hint}"
            ) from None

    def items(self) -> list[tuple[str, T]]:
        with self._lock:
            return list(self._entries.items())

    def __contains__(self, entry_id: str) -> bool:
        return entry_id in self._entries


class CallableKernel:
    """A kernel backed by any Python callable."""

    def __init__(self, name: str, fn: Callable[..., Sequence[torch.Tensor]]) -> None:
        self.name = name
        self._fn = fn

    def __call__(self, *inputs: torch.Tensor) -> Sequence[torch.Tensor]:
        return self._fn(*inputs)


class NullProvider:
    """Finds nothing: every subgraph runs in the fallback."""

    def find(self, subgraph: Subgraph) -> Kernel | None:
        return None


class ReferenceProvider:
    """Returns each subgraph's own reference module as its kernel. Used to test the rewrite:
    numerics must not change, and every replaced subgraph must run through the opaque op."""

    def __init__(self, kinds: Sequence[str] | None = None) -> None:
        self.kinds = set(kinds) if kinds is not None else None
        self.provided: list[Subgraph] = []

    def find(self, subgraph: Subgraph) -> Kernel | None:
        if self.kinds is not None and subgraph.kind not in self.kinds:
            return None
        self.provided.append(subgraph)
        module = subgraph.module()
        return CallableKernel(f"reference-{subgraph.key.short()}", module)


class ChainProvider:
    """Asks providers in order; the first kernel found wins."""

    def __init__(self, providers: Sequence[KernelProvider]) -> None:
        self.providers = list(providers)
        self._served: dict[str, KernelProvider] = {}

    def find(self, subgraph: Subgraph) -> Kernel | None:
        for p in self.providers:
            kernel = p.find(subgraph)
            if kernel is not None:
                self._served[subgraph.key.digest] = p
                return kernel
        return None

    def isolated_ms(self, subgraph: Subgraph) -> IsolatedMs | None:
        """The figures of the provider that served `subgraph`."""
        served = self._served.get(subgraph.key.digest)
        return None if served is None else isolated_figures(served, subgraph)
