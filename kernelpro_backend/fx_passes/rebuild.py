"""Rebuilding a subgraph from its canonical text: the inverse of `keys.canonical_text`.

Owns: parsing canonical text (one `vN = ns::op.overload[args] {kwargs}` line per node, then
`return ...`) back into a standalone `GraphModule` whose placeholders are the inputs in
canonical order and whose output is the tuple of outputs (the calling convention of
`Subgraph.module()`), with every node's meta["val"] propagated as fake tensors from the key's
input metas; and `rebuild_subgraph`, which wraps that graph as a `Subgraph` and checks that
re-keying it gives the structure hash it was stored under. `kernelpro cache verify` uses it to
re-prove cached kernels against a fresh reference.
Must not: import or call anything the text names beyond registered `torch.ops` overloads and
`operator.getitem` (entries come from bundles, which are not trusted), or run kernels.

How arguments are encoded (keys.normalize_arg) and decoded here: nodes are "%inK" / "%vN";
dtypes, memory formats and layouts are "torch.<name>"; devices are "device:<type>" (the key's
device field carries the index; such args are rebuilt on the target device); floats are their
repr() as a string ("0.5", "inf", "nan"), ints, bools and None are JSON; lists are lists;
complex numbers are "complex:<repr>". A string argument of a `str` schema slot (gelu's
approximate, div's rounding_mode) is kept as written, so the op schema tells a literal "1.0"
from the float 1.0: the encoding is lossless without changing any existing key.
"""

from __future__ import annotations

import hashlib
import json
import operator
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx as fx

from .keys import SubgraphKey, canonical_order, canonical_text
from .subgraph import Subgraph, TensorMeta, _int_ranges

_LINE = re.compile(r"^v(\d+) = ([A-Za-z0-9_.:]+)(\[.*)$")
_REF = re.compile(r"^%(in|v)(\d+)$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The only non-aten callables a subgraph holds. Anything else is refused, not imported.
_CALLABLES: dict[str, Callable[..., Any]] = {"_operator.getitem": operator.getitem}
_TORCH_ENUMS = (torch.dtype, torch.memory_format, torch.layout)


class RebuildError(ValueError):
    """Canonical text that cannot be turned back into a graph (malformed, unknown op, or an
    argument this torch cannot decode)."""


def resolve_target(name: str) -> Callable[..., Any]:
    """'aten::mm.default' -> torch.ops.aten.mm.default; '_operator.getitem' -> operator.getitem."""
    if name in _CALLABLES:
        return _CALLABLES[name]
    namespace, sep, rest = name.partition("::")
    op, dot, overload = rest.rpartition(".")
    parts = (namespace, op, overload)
    if not sep or not dot or not all(_IDENT.match(p) and not p.startswith("__") for p in parts):
        raise RebuildError(f"{name!r} is neither a torch op overload (ns::op.overload) nor getitem")
    try:
        target = getattr(getattr(getattr(torch.ops, namespace), op), overload)
    except (AttributeError, RuntimeError):
        raise RebuildError(
            f"torch {torch.__version__} has no op {name}; the entry was made with another torch "
            "(`kernelpro cache prune` drops entries of other toolchains)"
        ) from None
    if not isinstance(target, torch._ops.OpOverload):
        raise RebuildError(f"{name!r} resolves to a {type(target).__name__}, not an op overload")
    return target  # type: ignore[no-any-return]


def _is_str_slot(jit_type: Any) -> bool:
    while isinstance(jit_type, (torch._C.OptionalType, torch._C.ListType)):
        jit_type = jit_type.getElementType()
    return isinstance(jit_type, torch._C.StringType)


class _Decoder:
    def __init__(self, env: dict[str, fx.Node], device: torch.device, recorded: str) -> None:
        self.env = env
        self.device = device
        self.recorded = recorded  # device type the graph was traced on

    def value(self, raw: Any, str_slot: bool) -> Any:
        if raw is None or isinstance(raw, (bool, int)):
            return raw
        if isinstance(raw, list):
            return [self.value(x, str_slot) for x in raw]
        if not isinstance(raw, str):
            raise RebuildError(f"unexpected {type(raw).__name__} argument {raw!r}")
        if str_slot:
            return raw
        ref = _REF.match(raw)
        if ref:
            if raw[1:] not in self.env:
                raise RebuildError(f"{raw} is used before it is defined")
            return self.env[raw[1:]]
        kind, colon, rest = raw.partition(":")
        if raw.startswith("torch."):
            found = getattr(torch, raw.removeprefix("torch."), None)
            if not isinstance(found, _TORCH_ENUMS):
                raise RebuildError(f"{raw!r} is not a torch dtype, memory format or layout")
            return found
        if colon and kind == "device":
            return self.device if rest in (self.recorded, self.device.type) else torch.device(rest)
        if colon and kind == "complex":
            return complex(rest)
        if colon and kind == "sym":
            raise RebuildError(f"symbolic argument {raw!r}: symbolic subgraphs are never cached")
        try:
            return float(raw)
        except ValueError:
            raise RebuildError(
                f"cannot decode argument {raw!r} (not a node, enum or float)"
            ) from None

    def call(self, target: Callable[..., Any], args: Any, kwargs: Any) -> tuple[Any, Any]:
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise RebuildError("a node line needs a JSON list of args and a JSON object of kwargs")
        schema = getattr(target, "_schema", None)
        slots = {a.name: _is_str_slot(a.type) for a in schema.arguments} if schema else {}
        positional = [a.name for a in schema.arguments] if schema else []
        if schema is not None and len(args) > len(positional):
            raise RebuildError(f"{len(args)} positional args for {schema.name}: too many")
        new_args = tuple(
            self.value(a, bool(schema) and slots[positional[i]]) for i, a in enumerate(args)
        )
        new_kwargs = {}
        for k, v in kwargs.items():
            if schema is not None and k not in slots:
                raise RebuildError(f"{schema.name} has no argument named {k!r}")
            new_kwargs[k] = self.value(v, slots.get(k, False))
        return new_args, new_kwargs


def _parse_line(line: str) -> tuple[int, str, Any, Any]:
    match = _LINE.match(line)
    if not match:
        raise RebuildError(f"not a canonical node line: {line!r}")
    index, target, rest = int(match.group(1)), match.group(2), match.group(3)
    decoder = json.JSONDecoder()
    try:
        args, end = decoder.raw_decode(rest)
        if rest[end : end + 1] != " ":
            raise ValueError("expected one space between args and kwargs")
        kwargs, end2 = decoder.raw_decode(rest, end + 1)
    except ValueError as e:
        raise RebuildError(f"bad arguments in {line!r}: {e}") from None
    if rest[end2:]:
        raise RebuildError(f"trailing text after the kwargs in {line!r}")
    return index, target, args, kwargs


def rebuild_module(
    text: str,
    input_meta: Sequence[TensorMeta],
    device: torch.device | str = "cpu",
    recorded_device: str | None = None,
) -> fx.GraphModule:
    """The reference module for canonical `text` over inputs with `input_meta` (shape, stride,
    dtype name) on `device`: forward(in0, in1, ...) -> tuple(outputs), like `Subgraph.module()`.
    Device arguments of type `recorded_device` (default: `device`'s type) become `device`.
    Every node's meta["val"] holds a fake tensor (or tuple of them) of its result."""
    device = torch.device(device)
    lines = text.strip().splitlines()
    if not lines or not lines[-1].startswith("return "):
        raise RebuildError("canonical text must end with a `return v...` line")
    graph = fx.Graph()
    env: dict[str, fx.Node] = {
        f"in{i}": graph.placeholder(f"in{i}") for i in range(len(input_meta))
    }
    decoder = _Decoder(env, device, recorded_device or device.type)
    for expected, line in enumerate(lines[:-1]):
        index, target_name, args, kwargs = _parse_line(line)
        if index != expected:
            raise RebuildError(f"node v{index} where v{expected} was expected: {line!r}")
        target = resolve_target(target_name)
        new_args, new_kwargs = decoder.call(target, args, kwargs)
        node = graph.call_function(target, new_args, new_kwargs)
        node.name = f"v{index}"
        env[f"v{index}"] = node
    names = [n.strip() for n in lines[-1].removeprefix("return ").split(",")]
    if not names or any(not n.startswith("v") or n not in env for n in names):
        raise RebuildError(f"return names unknown nodes: {lines[-1]!r}")
    graph.output(tuple(env[n] for n in names))
    graph.lint()
    module = fx.GraphModule(torch.nn.Module(), graph, class_name="KernelproReference")
    _propagate_fake(module, input_meta, device)
    return module


def _propagate_fake(module: fx.GraphModule, input_meta: Sequence[TensorMeta], device: Any) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    mode = FakeTensorMode()
    fakes = []
    with mode:
        for shape, stride, dtype_name in input_meta:
            dtype = getattr(torch, dtype_name, None)
            if not isinstance(dtype, torch.dtype):
                raise RebuildError(f"input dtype {dtype_name!r} is not a torch dtype")
            fakes.append(torch.empty_strided(shape, stride, dtype=dtype, device=device))
    try:
        FakeTensorProp(module, mode).propagate_dont_convert_inputs(*fakes)
    except Exception as e:
        raise RebuildError(
            f"the rebuilt graph does not run on inputs {list(input_meta)}: {type(e).__name__}: {e}"
        ) from e


def key_device(key: SubgraphKey) -> torch.device:
    """Where a key's subgraph runs: 'sm_90' -> cuda, 'cpu' -> cpu."""
    return torch.device("cuda" if key.device.startswith("sm_") else key.device)


def rebuild_subgraph(
    text: str,
    key: SubgraphKey,
    kind: str = "",
    pattern: str = "",
    graph: str = "cached",
    device: torch.device | str | None = None,
) -> Subgraph:
    """A `Subgraph` rebuilt from canonical `text` under `key` (its input metas, precision and
    device), on `device` (default: the key's). Raises RebuildError when the text does not
    hash to the key's structure, or when re-canonicalising the rebuilt nodes does not give the
    same structure hash (a decoding bug: the rebuilt graph is not the one that was keyed)."""
    if hashlib.sha256(text.encode()).hexdigest() != key.structure:
        raise RebuildError("the subgraph text does not hash to the key's structure hash")
    target = torch.device(device) if device is not None else key_device(key)
    recorded = key_device(key).type
    module = rebuild_module(text, key.inputs, target, recorded)
    inputs = [n for n in module.graph.nodes if n.op == "placeholder"]
    members = [n for n in module.graph.nodes if n.op == "call_function"]
    (output,) = [n for n in module.graph.nodes if n.op == "output"]
    ordered_inputs, ordered = canonical_order(members, inputs)
    member_set = set(members)
    outputs = [n for n in ordered if any(u not in member_set for u in n.users)]
    rekeyed = canonical_text(ordered_inputs, ordered, outputs)
    if hashlib.sha256(rekeyed.encode()).hexdigest() != key.structure:
        raise RebuildError(
            "re-keying the rebuilt graph gives another structure hash; its canonical text is:\n"
            + rekeyed
        )
    return Subgraph(
        kind=kind,
        pattern=pattern,
        graph=graph,
        nodes=members,
        inputs=inputs,
        outputs=list(output.args[0]),
        device=target,
        precision=key.precision,
        symbolic=False,
        int_ranges=_int_ranges(inputs, member_set),
    )
