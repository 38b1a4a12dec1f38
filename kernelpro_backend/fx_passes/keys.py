"""Canonical structure and the stable key of a subgraph.

Owns: a canonical order of a node set that does not depend on node names or on the order of
unrelated nodes, the canonical text of that structure, and `SubgraphKey` (structure + input
shapes/strides/dtypes + device capability + precision policy + key-schema version).
Must not: know about caches, kernels or toolchains (the cache adds toolchain versions).
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import json
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx as fx

# Bump when the canonical text or the key's fields change meaning: old cache entries then miss.
KEY_SCHEMA_VERSION = 1


def _h(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:32]


def target_name(node: fx.Node) -> str:
    t = node.target
    if isinstance(t, torch._ops.OpOverload):
        return f"{t._schema.name}.{t._overloadname}"
    if callable(t):
        return f"{getattr(t, '__module__', '')}.{getattr(t, '__qualname__', repr(t))}"
    return str(t)


def normalize_arg(arg: Any, ref: Callable[[fx.Node], str]) -> Any:
    """Arguments as plain JSON-able data; nodes through `ref`."""
    if isinstance(arg, fx.Node):
        return ref(arg)
    if isinstance(arg, (list, tuple)):
        return [normalize_arg(a, ref) for a in arg]
    if isinstance(arg, dict):
        return {str(k): normalize_arg(v, ref) for k, v in sorted(arg.items())}
    if isinstance(arg, torch.device):
        return f"device:{arg.type}"  # the key's device field carries the rest
    if isinstance(arg, (torch.dtype, torch.memory_format, torch.layout)):
        return str(arg)
    if isinstance(arg, float):
        return repr(arg)
    if isinstance(arg, (bool, int, str)) or arg is None:
        return arg
    if isinstance(arg, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return f"sym:{arg}"
    return f"{type(arg).__name__}:{arg!r}"


def tensor_meta(node: fx.Node) -> tuple[tuple[int, ...], tuple[int, ...], str]:
    """(shape, stride, dtype) of a node's tensor value; raises if it is symbolic or missing."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        raise TypeError(f"node {node.name} has no tensor value in meta['val']")
    # Never int() a SymInt: that would specialise the dynamic size (a guard) as a side effect.
    if not all(isinstance(s, int) for s in (*val.shape, *val.stride())):
        raise TypeError(f"node {node.name} has symbolic sizes")
    return (
        tuple(int(s) for s in val.shape),
        tuple(int(s) for s in val.stride()),
        str(val.dtype).removeprefix("torch."),
    )


def canonical_order(
    members: Sequence[fx.Node], inputs: Sequence[fx.Node]
) -> tuple[list[fx.Node], list[fx.Node]]:
    """Order `inputs` and `members` canonically.

    Every node gets a Merkle hash of its op and arguments; inputs are labelled by their metadata
    refined by how they are used, so two inputs of the same shape are still told apart
    (x - y vs y - x). Members are then emitted in topological order with ties broken by hash,
    never by name or by position in the source graph (except between truly symmetric nodes,
    where either order gives the same text)."""
    member_set = set(members)
    position = {n: i for i, n in enumerate(members)}

    def meta_label(n: fx.Node) -> str:
        try:
            return _h("input", tensor_meta(n))
        except TypeError:
            return _h("input", "non-tensor")

    def forward(labels: dict[fx.Node, str]) -> dict[fx.Node, str]:
        hashes = dict(labels)
        for n in members:  # source order is topological
            args = normalize_arg((n.args, n.kwargs), lambda a: hashes[a])
            hashes[n] = _h(target_name(n), json.dumps(args, sort_keys=True))
        return hashes

    first = forward({p: meta_label(p) for p in inputs})
    refined: dict[fx.Node, str] = {}
    for p in inputs:
        uses = sorted(
            (first[u], i)
            for u in p.users
            if u in member_set
            for i, a in enumerate(_flat_args(u))
            if a is p
        )
        refined[p] = _h(meta_label(p), uses)
    hashes = forward(refined)

    first_use = {
        p: min((position[u] for u in p.users if u in member_set), default=0) for p in inputs
    }
    ordered_inputs = sorted(inputs, key=lambda p: (hashes[p], first_use[p]))

    indegree = {n: sum(1 for a in n.all_input_nodes if a in member_set) for n in members}
    ready = [(hashes[n], position[n], n) for n in members if indegree[n] == 0]
    heapq.heapify(ready)
    ordered: list[fx.Node] = []
    while ready:
        _, _, n = heapq.heappop(ready)
        ordered.append(n)
        for u in n.users:
            if u in member_set:
                indegree[u] -= 1
                if indegree[u] == 0:
                    heapq.heappush(ready, (hashes[u], position[u], u))
    assert len(ordered) == len(members), "subgraph has a cycle"
    return ordered_inputs, ordered


def _flat_args(node: fx.Node) -> list[Any]:
    flat: list[Any] = []

    def walk(a: Any) -> None:
        if isinstance(a, (list, tuple)):
            for x in a:
                walk(x)
        elif isinstance(a, dict):
            for x in a.values():
                walk(x)
        else:
            flat.append(a)

    walk((node.args, node.kwargs))
    return flat


def canonical_text(
    inputs: Sequence[fx.Node], members: Sequence[fx.Node], outputs: Sequence[fx.Node]
) -> str:
    """One line per node, nodes named by canonical position: the structure the key hashes."""
    names: dict[fx.Node, str] = {p: f"in{i}" for i, p in enumerate(inputs)}
    names.update({n: f"v{i}" for i, n in enumerate(members)})
    lines = []
    for n in members:
        args = normalize_arg(n.args, lambda a: "%" + names[a])
        kwargs = normalize_arg(n.kwargs, lambda a: "%" + names[a])
        lines.append(f"{names[n]} = {target_name(n)}{json.dumps(args)} {json.dumps(kwargs)}")
    lines.append("return " + ", ".join(names[o] for o in outputs))
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class SubgraphKey:
    """Everything that changes what a subgraph computes or which kernel is best for it."""

    structure: str  # sha256 of the canonical text
    inputs: tuple[tuple[tuple[int, ...], tuple[int, ...], str], ...]  # (shape, stride, dtype)
    device: str  # "sm_90", "cpu"
    precision: str  # "ieee", "tf32", "tf32x3"
    schema: int = KEY_SCHEMA_VERSION

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True, separators=(",", ":"))

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    def short(self) -> str:
        return self.digest[:12]

    @classmethod
    def from_json(cls, text: str) -> SubgraphKey:
        raw = json.loads(text)
        to_tuple = _deep_tuple
        return cls(
            structure=raw["structure"],
            inputs=to_tuple(raw["inputs"]),
            device=raw["device"],
            precision=raw["precision"],
            schema=raw["schema"],
        )


def _deep_tuple(x: Any) -> Any:
    if isinstance(x, list):
        return tuple(_deep_tuple(v) for v in x)
    return x


def device_capability(device: torch.device) -> str:
    """'sm_90' for a CUDA device of capability 9.0, else the device type ('cpu')."""
    if device.type == "cuda" and torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(device)
        return f"sm_{major}{minor}"
    return device.type


def precision_policy(option: str, conv: bool = False) -> str:
    """The float32 mode in force: the option if forced, else PyTorch's own setting: for a
    convolution's subgraph cuDNN's (`torch.backends.cudnn.allow_tf32`, on by default), for any
    other the float32 matmul precision. Inductor and eager run a user's float32 convolutions in
    TF32 by default; a worker that timed them in IEEE float32 timed what the graph never runs."""
    if option != "auto":
        return option
    if conv:
        return "tf32" if torch.backends.cudnn.allow_tf32 else "ieee"
    if torch.get_float32_matmul_precision() == "highest":
        return "ieee"
    return "tf32"
