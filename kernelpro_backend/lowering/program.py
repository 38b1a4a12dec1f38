"""Building a spec's program (loads, op list, stores) from a subgraph and its index maps.

Owns: turning each aten node into the codegen op IR (a small, closed set of op names the
renderer's table knows), loads of inputs and of views of inputs (strides taken from the view's
FakeTensor), the expansion of mean / var_mean into sums, row gathers as "gather" reductions
pushed down to the values read from memory, and the stores of the outputs.
Must not: choose templates or knobs, or render source.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx as fx

from ..codegen import index as ix
from ..codegen.errors import Unsupported
from ..codegen.optable import is_float
from ..fx_passes.ops import PIECEWISE, Role, op_name, role
from .maps import Map, reduction_parts, shape
from .pieces import piece_load, piece_value
from .views import is_view_of_input

Ref = tuple[str, Any]

_UNARY = {
    "exp", "log", "sqrt", "rsqrt", "abs", "sigmoid", "erf", "tanh", "relu", "neg",
    "reciprocal", "sin", "cos", "exp2", "log2", "floor", "ceil", "log1p", "expm1", "sign",
    "logical_not", "bitwise_not", "isnan", "silu", "mish", "hardsigmoid", "hardswish",
    "trunc", "round",
}  # fmt: skip
_BINARY = {
    "add", "sub", "mul", "div", "maximum", "minimum", "lt", "le", "gt", "ge", "eq", "ne",
    "logical_and", "logical_or", "bitwise_and", "bitwise_or", "fmod", "remainder",
}  # fmt: skip
_IDENTITY = {"clone", "alias", "lift_fresh_copy", "detach", "positive"}
REDUCE_OPS = ("sum", "max", "min", "gather")


def _replayed_view(node: fx.Node, inputs: set[fx.Node]) -> tuple[fx.Node, torch.Tensor]:
    """(the subgraph input `node` views, `node` as a meta tensor: that input's shape and
    strides at offset 0 with the chain's view ops applied to it)."""
    chain = []
    while node not in inputs:
        chain.append(node)
        node = node.all_input_nodes[0]
    root, base = node, node.meta["val"]
    t = torch.empty_strided(base.shape, base.stride(), dtype=base.dtype, device="meta")
    for view in reversed(chain):
        src = view.all_input_nodes[0]
        args = [t if a is src else a for a in view.args]
        try:
            t = view.target(*args, **view.kwargs)  # type: ignore[operator]
        except Exception as e:  # a view the input's strides do not allow
            raise Unsupported(f"{view.name}: {view.target} of input {root.name}: {e}") from None
    return root, t


def dtype_name(node: fx.Node) -> str:
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return str(val.dtype).removeprefix("torch.")
    raise Unsupported(f"{node.name} has no tensor value")


class ProgramBuilder:
    def __init__(
        self,
        inputs: Sequence[fx.Node],
        maps: dict[fx.Node, Map],
        selections: dict[fx.Node, tuple[fx.Node, ix.Index, int]] | None = None,
        store_predicates: dict[fx.Node, tuple[ix.Index, int]] | None = None,
        factory_reads: dict[fx.Node, tuple[fx.Node, Map]] | None = None,
    ) -> None:
        self.selections = selections or {}
        self.factory_reads = factory_reads or {}  # MapBuilder.factory_reads
        self.store_predicates = store_predicates or {}
        self.inputs = list(inputs)
        self.input_set = set(inputs)
        self.maps = maps
        self.loads: list[tuple[int, int, ix.Index]] = []
        self.ops: list[tuple[str, tuple[Any, ...], str]] = []
        self.refs: dict[fx.Node, Ref] = {}
        self.var_mean: dict[fx.Node, tuple[Ref, Ref]] = {}

    # -- leaves --------------------------------------------------------------------------
    def load(self, node: fx.Node) -> Ref:
        """Load of an input, or of a view of one, at the node's index map. A view's strides
        and offset are the input's replayed through the view ops, not the view's own record:
        a graph pass may leave that stale (BERT's attention after SDPA's decomposition on the
        CPU: its permuted output read with the strides of a contiguous one)."""
        root, val = _replayed_view(node, self.input_set)
        offset = int(val.storage_offset())
        linear = ix.add(
            *(ix.scale(c, int(st)) for c, st in zip(self.maps[node], val.stride(), strict=True))
        )
        entry = (self.inputs.index(root), offset, linear)
        if entry not in self.loads:
            self.loads.append(entry)
        return piece_load(self, node, ("L", self.loads.index(entry)))  # a cat's piece: its range

    def ref(self, arg: Any) -> Ref:
        if isinstance(arg, fx.Node):
            if arg in self.refs:
                return self.refs[arg]
            if is_view_of_input(arg, self.input_set):
                self.refs[arg] = self.load(arg)
                return self.refs[arg]
            raise Unsupported(f"{arg.name} is used before it is computed")
        if isinstance(arg, (bool, int, float)):
            return ("c", arg)
        raise Unsupported(f"argument {arg!r} is neither a tensor nor a number")

    def emit(self, op: str, args: Sequence[Ref], dtype: str) -> Ref:
        self.ops.append((op, tuple(args), dtype))
        return ("T", len(self.ops) - 1)

    # -- nodes ---------------------------------------------------------------------------
    def add_node(self, n: fx.Node) -> None:
        if n not in self.maps or n in self.refs:
            return
        if is_view_of_input(n, self.input_set):
            self.refs[n] = self.load(n)
            return
        if n in self.selections:
            self.refs[n] = self.ref(self.selections[n][0])
            return
        r = role(n)
        if n in self.factory_reads:
            self.refs[n] = self._factory(*self.factory_reads[n])
        elif op_name(n) in PIECEWISE:  # pointwise by pieces: pieces.py
            self.refs[n] = piece_value(self, n)
        elif r is Role.VIEW:
            self.refs[n] = self.ref(n.all_input_nodes[0])
        elif r is Role.GETITEM:
            src = n.args[0]
            assert isinstance(src, fx.Node)
            if op_name(src) in ("aten::max", "aten::min"):  # (values, indices) over a dim
                self.refs[n] = self._extreme(src, indices=bool(n.args[1] == 1))
                return
            mean_ref, var_ref = self._var_mean(src)
            self.refs[n] = var_ref if n.args[1] == 0 else mean_ref
        elif r is Role.REDUCTION:
            self.refs[n] = self._reduction(n)
        elif r is Role.POINTWISE:
            self.refs[n] = self._pointwise(n)
        elif r is Role.FACTORY:
            self.refs[n] = self._factory(n)
        elif r is Role.ROW_GATHER:
            self.refs[n] = self._row_gather(n)
        else:
            raise Unsupported(f"no op-table entry for {op_name(n)}")

    def _factory(self, n: fx.Node, m: Map | None = None) -> Ref:
        """`n`'s value at its map (`m`: at this one, for a view of it)."""
        name, m = op_name(n), m or self.maps.get(n)
        if name == "aten::scalar_tensor" or name == "aten::full":
            value = n.args[0] if name == "aten::scalar_tensor" else n.args[1]
            return self.emit("cast", (("c", value), ("c", dtype_name(n))), dtype_name(n))
        if name in ("aten::zeros", "aten::ones"):
            value = 0 if name == "aten::zeros" else 1
            return self.emit("cast", (("c", value), ("c", dtype_name(n))), dtype_name(n))
        if name == "prims::iota" and m:
            return self._iota(n, m, n.kwargs.get("start", 0), n.kwargs.get("step", 1))
        if name == "aten::arange" and m:  # (end) | (start, end) | (start, end, step)
            start, step = (0, 1) if len(n.args) == 1 else (n.args[0], (*n.args[2:3], 1)[0])
            return self._iota(n, m, start, step)
        raise Unsupported(f"factory {name} is not supported")

    def _iota(self, n: fx.Node, m: Map, start: Any, step: Any) -> Ref:
        """start + step * (the element's index along the 1-D factory), integers computed as
        integers, then cast to the factory's dtype (exact where the dtype holds the values)."""
        (index,) = m
        if not isinstance(start, int) or not isinstance(step, int):
            raise Unsupported(f"{n.format_node()}: a range with a non-integer start or step")
        ref = self.emit("index", (("c", index),), "int64")
        if step != 1:
            ref = self.emit("mul", (ref, ("c", step)), "int64")
        if start:
            ref = self.emit("add", (ref, ("c", start)), "int64")
        if dtype_name(n) != "int64":
            ref = self.emit("cast", (ref, ("c", dtype_name(n))), dtype_name(n))
        return ref

    def _reduction(self, n: fx.Node) -> Ref:
        name = op_name(n).removeprefix("aten::")
        src, rdims, _ = reduction_parts(n)
        x = self.ref(src)
        dt = dtype_name(n)
        count = math.prod(shape(src)[d] for d in rdims)
        if name == "sum":
            return self.emit("sum", (x,), dt)
        if name == "mean":
            return self.emit("div", (self.emit("sum", (x,), dt), ("c", count)), dt)
        if name in ("amax", "amin"):
            return self.emit("max" if name == "amax" else "min", (x,), dt)
        if name in ("argmax", "argmin"):
            if len(rdims) != 1 or n.args[1:2] in ((), (None,)):
                raise Unsupported(f"{n.format_node()}: {name} over one given dim only")
            if dtype_name(src) not in ("float32", "float16", "bfloat16"):
                raise Unsupported(f"{n.format_node()}: {name} of {dtype_name(src)} is not lowered")
            return self.emit(name, (x, ("c", rdims[0])), "int64")
        if name in ("var", "std"):  # var_mean's expansion; std its square root
            if getattr(n.target, "_overloadname", "") != "correction":
                raise Unsupported(f"{n.format_node()}: only the .correction overload is read")
            _, var = self._var_mean(n)
            return var if name == "var" else self.emit("sqrt", (var,), dt)
        raise Unsupported(f"reduction {name} is not supported")

    def _row_gather(self, n: fx.Node) -> Ref:
        """gather(src, -1, index) as "gather" reductions (the element at column `index` of each
        row) of the values src is computed from, with src's pointwise ops applied to the picked
        elements: picking commutes with elementwise ops on the same element, so the result is
        bit for bit the same, and a gather of a load needs no reduction before it - it shares
        the first pass over the row (cross-entropy picks the target logit while it finds the
        row's max, not in a third pass after the log-sum-exp)."""
        src, index = n.args[0], n.args[2]
        col = self.maps[src][-1]  # type: ignore[index]
        if len(col) != 1 or col[0][0] != 1 or not isinstance(col[0][1], int):
            raise Unsupported(f"{n.name} gathers along {col}, not along one domain dim")
        picker = _Picker(self, self.ref(index), col[0][1])
        return picker.pick(self.ref(src))

    def dtype_of(self, ref: Ref) -> str:
        if ref[0] == "L":
            return dtype_name(self.inputs[self.loads[ref[1]][0]])
        if ref[0] == "T":
            return str(self.ops[ref[1]][2])
        return "float32"  # the GEMM/attention accumulator

    def _extreme(self, n: fx.Node, indices: bool) -> Ref:
        """The values (max/min) or indices (argmax/argmin) output of max/min over one dim."""
        src, rdims, _ = reduction_parts(n)
        if len(rdims) != 1:
            raise Unsupported(f"{n.format_node()}: max/min over one dim only")
        largest = op_name(n) == "aten::max"
        if not indices:
            return self.emit("max" if largest else "min", (self.ref(src),), dtype_name(src))
        if dtype_name(src) not in ("float32", "float16", "bfloat16"):
            raise Unsupported(f"{n.format_node()}: indices of {dtype_name(src)} are not lowered")
        op = "argmax" if largest else "argmin"
        return self.emit(op, (self.ref(src), ("c", rdims[0])), "int64")

    def _var_mean(self, n: fx.Node) -> tuple[Ref, Ref]:
        if n not in self.var_mean:
            src, rdims, _ = reduction_parts(n)
            count = math.prod(shape(src)[d] for d in rdims)
            raw = n.kwargs.get("correction", 1)
            correction = 1 if raw is None else int(raw)  # type: ignore[arg-type]
            x, dt = self.ref(src), dtype_name(src)
            mean = self.emit("div", (self.emit("sum", (x,), dt), ("c", count)), dt)
            centred = self.emit("sub", (x, mean), dt)
            sq = self.emit("sum", (self.emit("mul", (centred, centred), dt),), dt)
            var = self.emit("div", (sq, ("c", max(count - correction, 0))), dt)
            self.var_mean[n] = (mean, var)
        return self.var_mean[n]

    def _pointwise(self, n: fx.Node) -> Ref:
        name = op_name(n).split("::")[-1]
        dt = dtype_name(n)
        args = list(n.args)
        kw = n.kwargs
        if name in _IDENTITY:
            return self.ref(args[0])
        if name in ("convert_element_type", "_to_copy", "to"):
            target = args[1] if name == "convert_element_type" else dt
            return self.emit(
                "cast", (self.ref(args[0]), ("c", str(target).removeprefix("torch."))), dt
            )
        if name in ("add", "sub") and kw.get("alpha", 1) != 1:
            b = self.emit("mul", (self.ref(args[1]), ("c", kw["alpha"])), dt)
            return self.emit(name, (self.ref(args[0]), b), dt)
        if name == "rsub":
            b = self.ref(args[0])
            if kw.get("alpha", 1) != 1:
                b = self.emit("mul", (b, ("c", kw["alpha"])), dt)
            return self.emit("sub", (self.ref(args[1]), b), dt)
        if name == "div" and kw.get("rounding_mode") is not None:
            mode = kw["rounding_mode"]
            q = self.emit("div", (self.ref(args[0]), self.ref(args[1])), dt)
            return self.emit("floor" if mode == "floor" else "trunc", (q,), dt)
        if name in _BINARY and len(args) == 2:
            return self.emit(name, (self.ref(args[0]), self.ref(args[1])), dt)
        if name in _UNARY and len(args) == 1:
            return self.emit(name, (self.ref(args[0]),), dt)
        if name == "gelu":
            approx = kw.get("approximate", "none")
            return self.emit("gelu_tanh" if approx == "tanh" else "gelu", (self.ref(args[0]),), dt)
        if name == "where":
            return self.emit("where", tuple(self.ref(a) for a in args[:3]), dt)
        if name == "fma":
            return self.emit("fma", tuple(self.ref(a) for a in args[:3]), dt)
        if name in ("clamp", "clamp_min", "clamp_max", "hardtanh"):
            return self._clamp(name, n, dt)
        if name == "leaky_relu":
            slope = args[1] if len(args) > 1 else 0.01
            return self.emit("leaky_relu", (self.ref(args[0]), ("c", slope)), dt)
        if name == "pow":
            return self._pow(n, dt)
        raise Unsupported(
            f"no op-table entry for aten::{name}{tuple(type(a).__name__ for a in args)}"
        )

    def _clamp(self, name: str, n: fx.Node, dt: str) -> Ref:
        args = [*n.args, None, None]
        lo, hi = {
            "clamp": (n.kwargs.get("min", args[1]), n.kwargs.get("max", args[2])),
            "clamp_min": (args[1], None),
            "clamp_max": (None, args[1]),
            "hardtanh": (-1.0 if args[1] is None else args[1], 1.0 if args[2] is None else args[2]),
        }[name]
        x = self.ref(args[0])
        if lo is not None:
            x = self.emit("maximum", (x, self.ref(lo)), dt)
        if hi is not None:
            x = self.emit("minimum", (x, self.ref(hi)), dt)
        return x

    def _pow(self, n: fx.Node, dt: str) -> Ref:
        base, exp = n.args[0], n.args[1]
        if isinstance(base, fx.Node) and isinstance(exp, (int, float)):
            x = self.ref(base)
            e = float(exp)
            named = {0.5: "sqrt", -0.5: "rsqrt", -1.0: "reciprocal"}
            if e in named:
                return self.emit(named[e], (x,), dt)
            if e.is_integer() and 0 <= e <= 8:
                acc: Ref = ("c", 1.0)
                for _ in range(int(e)):
                    acc = x if acc == ("c", 1.0) else self.emit("mul", (acc, x), dt)
                return acc if acc != ("c", 1.0) else self.emit("cast", (acc, ("c", dt)), dt)
            return self.emit("pow_pos", (x, ("c", e)), dt)
        if isinstance(base, (int, float)) and isinstance(exp, fx.Node) and base > 0:
            return self.emit(
                "exp2", (self.emit("mul", (self.ref(exp), ("c", math.log2(base))), dt),), dt
            )
        raise Unsupported("pow with a tensor exponent and tensor base is not supported")

    # -- outputs -------------------------------------------------------------------------
    def store(self, out: fx.Node) -> tuple[Ref, int, ix.Index, tuple[Any, ...]]:
        """(value, storage offset, index, predicate): the predicate (index, value) limits the
        store to the domain points that hold the output's slice; () stores everywhere."""
        val = out.meta["val"]
        linear = ix.add(
            *(ix.scale(c, int(st)) for c, st in zip(self.maps[out], val.stride(), strict=True))
        )
        predicate: tuple[Any, ...] = ()
        if out in self.selections:
            _, picked, value = self.selections[out]
            predicate = (picked, value)
        elif out in self.store_predicates:
            predicate = self.store_predicates[out]
        return (self.ref(out), 0, linear, predicate)


class _Picker:
    """Rewrites a value varying along the row into the same ops over its picked elements."""

    def __init__(self, prog: ProgramBuilder, index: Ref, col_dim: int) -> None:
        self.prog, self.index, self.col_dim = prog, index, col_dim
        self.along: dict[Ref, bool] = {}
        self.picked: dict[Ref, Ref] = {}

    def varies(self, ref: Ref) -> bool:
        """Whether the value differs between columns of a row."""
        if ref[0] == "c":
            return False
        if ref not in self.along:
            if ref[0] == "L":
                self.along[ref] = self.col_dim in ix.dims_of(self.prog.loads[ref[1]][2])
            elif ref[0] == "T":
                op, args, _ = self.prog.ops[ref[1]]
                self.along[ref] = op not in REDUCE_OPS and any(self.varies(a) for a in args)
            else:
                self.along[ref] = True  # the accumulator tile
        return self.along[ref]

    def pick(self, ref: Ref) -> Ref:
        if not self.varies(ref):
            return ref
        if ref in self.picked:
            return self.picked[ref]
        prog = self.prog
        result: Ref | None = None
        if ref[0] == "T":
            op, args, dt = prog.ops[ref[1]]
            # float operands only: the pick moves float32 bit patterns, which is what every
            # float value is inside a kernel (bool/int values are picked after the op instead)
            if all(not self.varies(a) or is_float(prog.dtype_of(a)) for a in args):
                result = prog.emit(op, tuple(self.pick(a) for a in args), dt)
        if result is None:
            dt = prog.dtype_of(ref)
            if not is_float(dt):
                raise Unsupported(f"gather of a {dt} value: the row gather picks float values")
            result = prog.emit("gather", (ref, self.index, ("c", self.col_dim)), dt)
        self.picked[ref] = result
        return result
