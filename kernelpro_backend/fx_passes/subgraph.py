"""A fusable subgraph: its nodes in canonical order, its key, and its standalone reference.

Owns: turning a partition group into a `Subgraph` (inputs, outputs, kind, pattern, key), the
extraction of a subgraph as a standalone `GraphModule` whose placeholders and outputs are in
canonical order (the calling convention of every kernel for it), and random example inputs.
Must not: launch kernels or decide which subgraphs to replace.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx as fx

from .group import Group
from .keys import (
    SubgraphKey,
    canonical_order,
    canonical_text,
    device_capability,
    precision_policy,
    tensor_meta,
)
from .ops import Role, op_name, role
from .partition import partition
from .patterns import pattern_name

TensorMeta = tuple[tuple[int, ...], tuple[int, ...], str]


@dataclasses.dataclass(frozen=True)
class IntRange:
    """Valid values [low, high) of an integer input (class indices, gather indices)."""

    low: int
    high: int


@dataclasses.dataclass(eq=False)
class Subgraph:
    """One fusable piece of an aten graph."""

    kind: str  # gemm | conv | attention | reduction | pointwise
    pattern: str  # a readable guess of what it computes: "softmax", "addmm+epilogue", ...
    graph: str  # forward | backward | inference
    nodes: list[fx.Node]  # members, canonical order
    inputs: list[fx.Node]  # external tensors read, canonical order
    outputs: list[fx.Node]  # members used outside, canonical order
    device: torch.device
    precision: str
    symbolic: bool  # some size is symbolic: never replaced, left to the fallback
    int_ranges: dict[int, IntRange]  # input index -> valid range, for integer inputs
    tuple_output: bool = False  # an output is a tuple (a multi-output op used directly)
    # An instance of a symbolic subgraph (fx_passes/concrete.py): the symbolic key's digest,
    # shared by its instances at every size.
    family: str = ""
    # Configurations that won at other sizes of the same family, (template, knobs), nearest
    # first: the search measures them beside its seed (tuner/finder.py fills them in).
    hints: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    # Measure the hints alone (a neighbouring size's winner proved at this size, no search).
    hints_only: bool = False
    # An instance's values of its family's dynamic dimensions (each input dimension that is
    # one symbol), which the `compile_sizes` option is checked against (tuner/finder.py).
    dynamic_sizes: tuple[int, ...] = ()
    # The canonical text and key, fixed when the subgraph is made (`dataclasses.replace`
    # keeps them): the fallback later edits the graph's nodes in place (Inductor turns `view`
    # into `reshape` before an FX-cache miss's codegen), and a key read after that would not
    # be the one the rewrite looked up. A replace that changes the nodes (lowering/pieces.py's
    # private copies) keeps the key of the subgraph it computes.
    text: str = dataclasses.field(default="", repr=False, compare=False)
    _key: SubgraphKey | None = dataclasses.field(default=None, repr=False, compare=False)
    _no_key: tuple[type[Exception], str] | None = dataclasses.field(
        default=None, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if self.text and (self._key is not None or self._no_key is not None):
            return
        self.text = canonical_text(self.inputs, self.nodes, self.outputs)
        if self.symbolic:
            self._no_key = (
                ValueError,
                "a subgraph with symbolic sizes has no key; it stays with the fallback",
            )
            return
        try:
            self._key = SubgraphKey(
                structure=hashlib.sha256(self.text.encode()).hexdigest(),
                inputs=tuple(tensor_meta(p) for p in self.inputs),
                device=device_capability(self.device),
                precision=self.precision,
            )
        except (TypeError, ValueError) as e:  # an input without a static tensor value
            self._no_key = (type(e), str(e))

    @property
    def key(self) -> SubgraphKey:
        """Raises ValueError (symbolic sizes) or TypeError (an input has no static tensor
        value) where the subgraph has none."""
        if self._key is None:
            kind, why = self._no_key or (ValueError, "no key")
            raise kind(why)
        return self._key

    @property
    def ops(self) -> list[str]:
        """Compute ops (no views or getitems), canonical order."""
        skip = (Role.VIEW, Role.GETITEM, Role.FACTORY)
        return [op_name(n).removeprefix("aten::") for n in self.nodes if role(n) not in skip]

    @property
    def dynamic(self) -> bool:
        """Symbolic sizes, served per concrete size through the shape dispatcher
        (fx_passes/concrete.py, rewrite/dispatch.py); tuple outputs cannot be."""
        return self.symbolic and not self.tuple_output and bool(self.inputs)

    @property
    def input_meta(self) -> list[TensorMeta]:
        return [tensor_meta(p) for p in self.inputs]

    @property
    def output_meta(self) -> list[TensorMeta]:
        return [tensor_meta(o) for o in self.outputs]

    def module(self) -> fx.GraphModule:
        """The subgraph as a standalone module: forward(*inputs) -> tuple(outputs), in canonical
        order. Running it eagerly is the reference every kernel is checked against."""
        graph = fx.Graph()
        env: dict[fx.Node, fx.Node] = {}
        for i, p in enumerate(self.inputs):
            ph = graph.placeholder(f"in{i}")
            ph.meta = dict(p.meta)
            env[p] = ph
        for n in self.nodes:
            env[n] = graph.node_copy(n, lambda a: env[a])
        graph.output(tuple(env[o] for o in self.outputs))
        graph.lint()
        return fx.GraphModule(torch.nn.Module(), graph, class_name="KernelproReference")

    def make_inputs(
        self, seed: int = 0, device: torch.device | str | None = None
    ) -> list[torch.Tensor]:
        """Random inputs with the subgraph's shapes, strides and dtypes (never all zeros)."""
        return random_inputs(
            self.input_meta, self.int_ranges, seed, torch.device(device or self.device)
        )


def random_inputs(
    metas: Sequence[TensorMeta],
    int_ranges: dict[int, IntRange],
    seed: int,
    device: torch.device,
) -> list[torch.Tensor]:
    # On a GPU the values are drawn there: drawing gigabytes on the host (float64, then a
    # copy) took ~15 s per input set for a 6 GB input, longer than a whole search's budget.
    on_gpu = torch.device(device).type == "cuda"
    gen = torch.Generator(device=device if on_gpu else "cpu").manual_seed(seed)
    make = {"generator": gen, "device": device} if on_gpu else {"generator": gen}
    out = []
    for i, (shape, stride, dtype_name) in enumerate(metas):
        dtype = getattr(torch, dtype_name)
        # Fill the whole backing storage, then view it with the exact strides (expanded and
        # permuted inputs included).
        storage = (
            1 + sum((s - 1) * st for s, st in zip(shape, stride, strict=True)) if all(shape) else 0
        )
        if dtype.is_floating_point or dtype.is_complex:
            draw = torch.float32 if on_gpu and dtype.itemsize <= 4 else torch.float64
            base = torch.randn(storage, dtype=draw, **make).to(dtype)
        elif dtype == torch.bool:
            base = torch.randint(0, 2, (storage,), **make).bool()
        else:
            r = int_ranges.get(i, IntRange(0, 8))
            base = torch.randint(r.low, r.high, (storage,), dtype=dtype, **make)
        out.append(base.to(device).as_strided(shape, stride))
    return out


def _is_symbolic(nodes: Sequence[fx.Node]) -> bool:
    for n in nodes:
        val = n.meta.get("val")
        vals = val if isinstance(val, (list, tuple)) else [val]
        for v in vals:
            if isinstance(v, torch.Tensor) and any(
                not isinstance(s, int) for s in (*v.shape, *v.stride())
            ):
                return True
            if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                return True
        if not isinstance(val, (torch.Tensor, list, tuple)) and n.op != "call_function":
            return True
    return False


def _int_ranges(inputs: Sequence[fx.Node], members: set[fx.Node]) -> dict[int, IntRange]:
    ranges: dict[int, IntRange] = {}
    for i, p in enumerate(inputs):
        val = p.meta.get("val")
        if (
            not isinstance(val, torch.Tensor)
            or val.dtype.is_floating_point
            or val.dtype == torch.bool
        ):
            continue
        for u, value in _uses(p, members):
            name = op_name(u)
            src = u.args[0].meta.get("val") if isinstance(u.args[0], fx.Node) else None
            if not isinstance(src, torch.Tensor) or not all(isinstance(d, int) for d in src.shape):
                continue
            if name in ("aten::nll_loss_forward", "aten::nll_loss_backward"):
                target = u.args[1] if name == "aten::nll_loss_forward" else u.args[2]
                if target is value:
                    classes = src.shape[1] if src.dim() > 1 else src.shape[0]
                    ranges[i] = IntRange(0, classes)
            elif (
                name in ("aten::gather", "aten::index_select", "aten::scatter")
                and len(u.args) > 2
                and u.args[2] is value
            ):
                dim = u.args[1]
                if isinstance(dim, int):
                    ranges[i] = IntRange(0, src.shape[dim])
            elif name == "aten::eq" and (length := _iota_length(u, value)) is not None:
                ranges[i] = IntRange(0, length)  # a one-hot: the value is a column index
    return ranges


def _iota_length(eq: fx.Node, value: fx.Node) -> int | None:
    """The length of the prims.iota (through views) that `eq` compares `value` with, if any."""
    other = next((a for a in eq.args[:2] if isinstance(a, fx.Node) and a is not value), None)
    while other is not None and role(other) is Role.VIEW and isinstance(other.args[0], fx.Node):
        other = other.args[0]
    if other is None or op_name(other) != "prims::iota" or not isinstance(other.args[0], int):
        return None
    return other.args[0]


def _uses(p: fx.Node, members: set[fx.Node]) -> list[tuple[fx.Node, fx.Node]]:
    """(member, the value it reads) for every member that reads `p` itself or `p` passed through
    views and the value branches of `where` (cross-entropy's `where(t != ignore, t, 0)` and
    `unsqueeze` before its gather): those members see p's values as they are."""
    found: list[tuple[fx.Node, fx.Node]] = []
    stack, seen = [p], {p}
    while stack:
        value = stack.pop()
        for u in value.users:
            if u not in members or not u.args:
                continue
            found.append((u, value))
            passes = (role(u) is Role.VIEW and u.args[0] is value) or (
                op_name(u) == "aten::where" and value in u.args[1:3]
            )
            if passes and u not in seen:
                seen.add(u)
                stack.append(u)
    return found


def _outside_views(nodes: Sequence[fx.Node]) -> set[fx.Node]:
    """Members that are views of values from outside (directly, or through other such views)
    and are read outside as well: the outside tensor's own memory, which a kernel returning it
    would copy. BERT's MLM head, its GEMM split from the epilogue: `logits = addmm.view(B, T,
    V)` returned beside `logits.view(-1, V).float()`, 1 GB copied a step (H100, bf16)."""
    members, dropped = set(nodes), set()
    changed = True
    while changed:
        changed = False
        for n in nodes:
            if n in dropped or role(n) is not Role.VIEW:
                continue
            from_outside = all(a not in members or a in dropped for a in n.all_input_nodes)
            if from_outside and any(u not in members for u in n.users):
                dropped.add(n)
                changed = True
    if all(role(n) in (Role.VIEW, Role.GETITEM, Role.FACTORY) for n in members - dropped):
        return set()  # nothing computed is left: the group stays as the partitioner made it
    return dropped


def subgraph_of_group(group: Group, graph_kind: str, precision: str) -> Subgraph:
    """The group as a subgraph, but for its views of outside values that are read outside too
    (`_outside_views`): those stay in the graph as they are, and the subgraph reads them."""
    dropped = _outside_views(group.nodes)
    if dropped:
        group = dataclasses.replace(group, nodes=[n for n in group.nodes if n not in dropped])
    member_set = set(group.nodes)
    external: list[fx.Node] = []
    for n in group.nodes:
        for a in n.all_input_nodes:
            if a not in member_set and a not in external:
                external.append(a)
    inputs, members = canonical_order(group.nodes, external)
    outputs = [n for n in members if any(u not in member_set for u in n.users)]
    ops = [
        op_name(n).removeprefix("aten::")
        for n in members
        if role(n) not in (Role.VIEW, Role.GETITEM, Role.FACTORY)
    ]
    device = torch.device("cpu")
    for n in (*inputs, *members):
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor):
            device = val.device
            break
    # Outputs that are tuples (multi-output ops used directly) cannot be described as tensors.
    tuple_output = any(not isinstance(o.meta.get("val"), torch.Tensor) for o in outputs)
    return Subgraph(
        kind=group.kind,
        pattern=pattern_name(group.kind, ops, graph_kind),
        graph=graph_kind,
        nodes=members,
        inputs=inputs,
        outputs=outputs,
        device=device,
        precision=precision,
        symbolic=_is_symbolic([*inputs, *members]) or tuple_output,
        int_ranges=_int_ranges(inputs, member_set),
        tuple_output=tuple_output,
    )


def find_subgraphs(
    gm: fx.GraphModule, graph_kind: str, precision_option: str = "auto"
) -> list[Subgraph]:
    """Partition an aten graph (from AOTAutograd) into subgraphs, in graph order."""
    return [
        subgraph_of_group(g, graph_kind, precision_policy(precision_option, conv=g.kind == "conv"))
        for g in partition(gm.graph)
    ]
