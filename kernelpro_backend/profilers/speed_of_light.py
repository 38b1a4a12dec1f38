"""The speed-of-light model: the least time any kernel needs for a subgraph on a device.

Owns: counting a subgraph's FLOPs per aten op (mm/addmm/bmm 2MNK, convolution, attention
4*B*H*Sq*Sk*D, halved when causal, backward 2.5x forward; pointwise 1 per output element;
reductions 1 per input element) and the fewest bytes it must move (each external input read
once, each output written once; an output that is a view of an input or of another output
is written by no kernel, and an input only viewed, never computed from, is not read: see
`untouched`), and `SpeedOfLight`, which turns them into a time with the
device's measured `Ceilings`: max(flops / compute roof, bytes / DRAM bandwidth); and
`subgraph_cost`, the same two numbers of a callable counted by running it once under torch's
FlopCounterMode (for a subgraph known only as a module, as `kernelpro profile` has it).
Must not: time kernels or read profiler output.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Sequence
from typing import Any

import torch
import torch.fx as fx
from torch.multiprocessing.reductions import StorageWeakRef

from ..fx_passes.ops import Role, is_attention_op, op_name, role
from .ceilings import Ceilings

TensorMeta = tuple[tuple[int, ...], tuple[int, ...], str]


@dataclasses.dataclass(frozen=True)
class Work:
    """What a subgraph must do, whatever kernel does it."""

    tensor_flops: float  # matmul-like work, eligible for tensor cores
    other_flops: float  # pointwise and reduction work, on the FP32 pipes
    bytes: int  # external inputs read once + outputs written once
    tensor_dtype: str  # dtype of the matmul-like operands (picks the compute roof)
    # depthwise convolutions' work in 16-bit floats: the FMA units, two-wide (HFMA2); in
    # float32 it counts in other_flops
    fma16_flops: float = 0.0

    @property
    def flops(self) -> float:
        return self.tensor_flops + self.other_flops + self.fma16_flops

    def compute_s(self, ceilings: Ceilings, precision: str) -> float:
        """The least time the math takes: the FP32 pipes' work at their rate (16-bit FMAs at
        twice it), the tensor-core work at the dtype's and precision policy's peak."""
        seconds = (self.other_flops + self.fma16_flops / 2) / ceilings.fp32_flops_per_s
        if self.tensor_flops:
            peak = ceilings.peak_flops_per_s(self.tensor_dtype, precision, tensor_op=True)
            seconds += self.tensor_flops / peak
        return seconds


def _val(arg: object) -> torch.Tensor | None:
    val = arg.meta.get("val") if isinstance(arg, fx.Node) else None
    return val if isinstance(val, torch.Tensor) else None


def _bound_args(node: fx.Node) -> dict[str, Any]:
    """The node's arguments by schema name."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return {}
    names = [a.name for a in target._schema.arguments]
    bound = dict(zip(names, node.args, strict=False))
    bound.update(node.kwargs)
    return bound


def _numel(t: torch.Tensor | None) -> int:
    return int(t.numel()) if t is not None else 0


def _gemm_flops(node: fx.Node) -> float:
    name = op_name(node)
    a, b = (
        (node.args[1], node.args[2]) if name in ("aten::addmm", "aten::baddbmm") else node.args[:2]
    )
    ta, tb, out = _val(a), _val(b), _val(node)
    if ta is None or tb is None:
        return 0.0
    flops = 2.0 * ta.numel() * tb.shape[-1]  # (B*)M*K times N
    return flops + (_numel(out) if name in ("aten::addmm", "aten::baddbmm") else 0)


def _conv_flops(node: fx.Node) -> float:
    args = _bound_args(node)
    weight = _val(args.get("weight"))
    if weight is None:
        return 0.0
    window = weight.shape[1] * math.prod(weight.shape[2:])  # Cin/groups (or Cout/groups) * k
    if op_name(node) == "aten::convolution_backward":
        grad_out = _val(args.get("grad_output"))
        mask = args.get("output_mask") or [True, True, True]
        per_pass = 2.0 * _numel(grad_out) * window
        if args.get("transposed"):
            per_pass = 2.0 * _numel(_val(args.get("input"))) * window
        return per_pass * (int(bool(mask[0])) + int(bool(mask[1])))
    if args.get("transposed"):
        return 2.0 * _numel(_val(args.get("input"))) * window
    return 2.0 * _numel(_val(node)) * window


def _depthwise(node: fx.Node) -> bool:
    """One input channel a group: each output sums only its window (k*k products), no channel
    sum to give a tensor core its K, so the math runs on the FMA units (cuDNN's and the
    conv_depthwise templates' alike)."""
    args = _bound_args(node)
    weight = _val(args.get("weight"))
    return weight is not None and int(args.get("groups") or 1) > 1 and int(weight.shape[1]) == 1


def _first_tensor(node: fx.Node) -> torch.Tensor | None:
    """The value of the op's first tensor argument (its operands' dtype)."""
    return next((_val(a) for a in node.args if _val(a) is not None), None)


def _half(node: fx.Node) -> bool:
    """Whether the op's operands are 16-bit floats."""
    first = _first_tensor(node)
    return first is not None and first.dtype in (torch.float16, torch.bfloat16)


def _attention_flops(node: fx.Node) -> float:
    args = _bound_args(node)
    q, k, v = (_val(args.get(n)) for n in ("query", "key", "value"))
    if q is None or k is None or v is None:
        return 0.0
    batch_heads = math.prod(q.shape[:-2])
    sq, sk = q.shape[-2], k.shape[-2]
    flops = 2.0 * batch_heads * sq * sk * (q.shape[-1] + v.shape[-1])  # QK^T and PV
    if args.get("is_causal"):
        flops /= 2
    return flops * (2.5 if "backward" in op_name(node) else 1.0)


def count_work(
    nodes: Sequence[fx.Node],
    input_meta: Sequence[TensorMeta],
    output_meta: Sequence[TensorMeta],
    inputs: Sequence[fx.Node] = (),
    outputs: Sequence[fx.Node] = (),
) -> Work:
    """The work of `nodes`; with their `inputs` and `outputs` (the nodes of the metas, in the
    same order) the bytes leave out what `untouched` finds no kernel has to move."""
    tensor_flops = other_flops = fma16_flops = 0.0
    tensor_dtype = ""
    for node in nodes:
        r = role(node)
        if is_attention_op(node):
            r = Role.ATTENTION  # role() says OTHER for ops tagged random (dropout)
        if r is Role.CONV and _depthwise(node):
            if _half(node):
                fma16_flops += _conv_flops(node)
            else:
                other_flops += _conv_flops(node)
        elif r in (Role.GEMM, Role.CONV, Role.ATTENTION):
            counter = {Role.GEMM: _gemm_flops, Role.CONV: _conv_flops}.get(r, _attention_flops)
            tensor_flops += counter(node)
            first = _first_tensor(node)
            if not tensor_dtype and first is not None:
                tensor_dtype = str(first.dtype).removeprefix("torch.")
        elif r is Role.POINTWISE:
            out = node.meta.get("val")
            other_flops += _numel(out if isinstance(out, torch.Tensor) else None)
        elif r is Role.REDUCTION:
            other_flops += _numel(_val(node.args[0]) if node.args else None)
    unread, unwritten = untouched(nodes, inputs, outputs) if inputs or outputs else ((), ())
    nbytes = fewest_bytes(input_meta, output_meta, unread, unwritten)
    return Work(tensor_flops, other_flops, nbytes, tensor_dtype, fma16_flops)


def fewest_bytes(
    input_meta: Sequence[TensorMeta],
    output_meta: Sequence[TensorMeta],
    unread: Collection[int] = (),
    unwritten: Collection[int] = (),
) -> int:
    """Inputs read once (an expanded, stride-0 dim holds one element) plus outputs written once,
    but for the inputs at the `unread` and the outputs at the `unwritten` indices."""
    total = 0
    for i, (shape, stride, dtype) in enumerate(input_meta):
        if i not in unread:
            unique = math.prod(s for s, st in zip(shape, stride, strict=True) if st != 0)
            total += unique * _itemsize(dtype)
    for i, (shape, _, dtype) in enumerate(output_meta):
        if i not in unwritten:
            total += math.prod(shape) * _itemsize(dtype)
    return total


_LAYOUT = (Role.VIEW, Role.GETITEM)


def untouched(
    nodes: Sequence[fx.Node], inputs: Sequence[fx.Node], outputs: Sequence[fx.Node]
) -> tuple[frozenset[int], frozenset[int]]:
    """(indices of the inputs no kernel has to read, of the outputs none has to write).

    An output reached from an input or from another output through views alone (and sharing
    its storage, as the traced values say: a reshape that copies is no view) is that tensor's
    memory: the reference returns it as a view, and so may a kernel (validation accepts the
    aliases the reference has). BERT's MLM head left `logits = addmm.view(B, T, V)` returned
    beside `logits.view(-1, V).float()`: counted as written, the bound asked for 4.0 GB where
    a correct kernel moves 3.0 (1 GB read, 2 GB written: 1.018 ms against a 1.336 ms bound,
    H100). An input whose members only view it, and whose views no compute reads, is not read.
    Views of one value that is no output are still counted each (they may be disjoint pieces
    of it, a split QKV: counting one of them would let a kernel skip the others)."""
    members, held = set(nodes), {*inputs, *outputs}
    unwritten = set()
    for i, out in enumerate(outputs):
        base = out
        while base in members and role(base) in _LAYOUT and base.all_input_nodes:
            base = base.all_input_nodes[0]
            if base in held and _within(_val(out), _val(base)):
                unwritten.add(i)
                break
    unread = {i for i, p in enumerate(inputs) if not _computed_from(p, members)}
    return frozenset(unread), frozenset(unwritten)


def _computed_from(source: fx.Node, members: set[fx.Node]) -> bool:
    """Whether a member other than a view sharing `source`'s storage reads it, directly or
    through such views."""
    stack = [source]
    while stack:
        for user in stack.pop().users:
            if user not in members:
                continue
            if role(user) not in _LAYOUT or not _same_storage(user, source):
                return True
            stack.append(user)
    return False


def _same_storage(a: fx.Node, b: fx.Node) -> bool:
    ta, tb = _val(a), _val(b)
    return ta is not None and tb is not None and _shared(ta, tb)  # unknown: counted


def _shared(a: torch.Tensor, b: torch.Tensor) -> bool:
    return StorageWeakRef(a.untyped_storage()) == StorageWeakRef(b.untyped_storage())


def _within(view: torch.Tensor | None, base: torch.Tensor | None) -> bool:
    """Whether `view` shares `base`'s storage and every byte it addresses is one of `base`'s
    (an as_strided of a slice may address the rest of the slice's storage)."""
    if view is None or base is None:
        return False
    if not _shared(view, base):
        return False
    span, base_span = _byte_span(view), _byte_span(base)
    if span is None or base_span is None:
        return False
    return base_span[0] <= span[0] and span[1] <= base_span[1]


def _byte_span(t: torch.Tensor) -> tuple[int, int] | None:
    """[first, last] byte `t` addresses in its storage; None when unknown (symbolic)."""
    values = (*t.shape, *t.stride(), t.storage_offset())
    if not all(isinstance(v, int) for v in values):
        return None
    ints = [int(v) for v in values]
    rank, item = t.dim(), t.element_size()
    sizes, strides, offset = ints[:rank], ints[rank : 2 * rank], ints[-1]
    if 0 in sizes:
        return offset * item, offset * item - 1
    last = offset + sum((n - 1) * st for n, st in zip(sizes, strides, strict=True))
    return offset * item, (last + 1) * item - 1


# A measured time below the bound by more than this fraction (beyond its spread) is beyond the
# device: ceilings are what simple kernels reach, a tuned kernel may beat them by a few percent,
# never by 10%.
SOL_MARGIN = 0.9


def beyond_light(median_ms: float, spread_ms: float, sol_ms: float | None) -> str | None:
    """Why a measured time is beyond the bound (under SOL_MARGIN of it, its spread added), or
    None where it is not (or there is no bound)."""
    if sol_ms is None or median_ms + spread_ms >= SOL_MARGIN * sol_ms:
        return None
    return (
        f"measured {median_ms:.4g} ms (spread {spread_ms:.2g}) is faster than the "
        f"speed-of-light bound {sol_ms:.4g} ms"
    )


def _itemsize(dtype: str) -> int:
    return int(getattr(torch, dtype).itemsize)


class SpeedOfLight:
    """Speed-of-light times from `Work` and measured `Ceilings`."""

    @staticmethod
    def time_ms(work: Work, ceilings: Ceilings, precision: str) -> float:
        memory_s = work.bytes / ceilings.dram_bytes_per_s
        return max(work.compute_s(ceilings, precision), memory_s) * 1e3

    @staticmethod
    def memory_bound_ms(work: Work, ceilings: Ceilings, precision: str) -> float | None:
        """The DRAM-bound time when moving the bytes takes longer than the math, else None."""
        memory_ms = work.bytes / ceilings.dram_bytes_per_s * 1e3
        return memory_ms if memory_ms >= SpeedOfLight.time_ms(work, ceilings, precision) else None

    @staticmethod
    def work(subgraph: Any) -> Work:
        inputs, outputs = getattr(subgraph, "inputs", ()), getattr(subgraph, "outputs", ())
        return count_work(
            subgraph.nodes, subgraph.input_meta, subgraph.output_meta, inputs, outputs
        )

    @classmethod
    def for_subgraph(cls, subgraph: Any, ceilings: Ceilings) -> tuple[float, int, float]:
        """(flops, bytes, sol_ms) of a `Subgraph` on the device the ceilings were measured on."""
        work = cls.work(subgraph)
        return work.flops, work.bytes, cls.time_ms(work, ceilings, subgraph.precision)


def subgraph_cost(module: Any, inputs: list[Any]) -> tuple[float, float]:
    """(FLOPs, bytes): FLOPs of matmul/conv/attention ops as torch counts them (others count
    as one per output element); bytes of the external inputs and outputs, read/written once
    (an output that is a view of an input is that input's memory: not written)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.no_grad():
        outputs = module(*inputs)
    ins = [t for t in inputs if isinstance(t, torch.Tensor)]
    written = [
        t for t in outputs if isinstance(t, torch.Tensor) and not any(_within(t, x) for x in ins)
    ]
    nbytes = sum(t.numel() * t.element_size() for t in [*ins, *written])
    elementwise = sum(t.numel() for t in written)
    return float(max(counter.get_total_flops(), elementwise)), float(nbytes)
