"""The speed-of-light model: the least time any kernel needs for a subgraph on a device.

Owns: counting a subgraph's FLOPs per aten op (mm/addmm/bmm 2MNK, convolution, attention
4*B*H*Sq*Sk*D, halved when causal, backward 2.5x forward; pointwise 1 per output element;
reductions 1 per input element) and the fewest bytes it must move (each external input read
once, each output written once), and `SpeedOfLight`, which turns them into a time with the
device's measured `Ceilings`: max(flops / compute roof, bytes / DRAM bandwidth); and
`subgraph_cost`, the same two numbers of a callable counted by running it once under torch's
FlopCounterMode (for a subgraph known only as a module, as `kernelpro profile` has it).
Must not: time kernels or read profiler output.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx as fx

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

    @property
    def flops(self) -> float:
        return self.tensor_flops + self.other_flops


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
    nodes: Sequence[fx.Node], input_meta: Sequence[TensorMeta], output_meta: Sequence[TensorMeta]
) -> Work:
    tensor_flops = other_flops = 0.0
    tensor_dtype = ""
    for node in nodes:
        r = role(node)
        if is_attention_op(node):
            r = Role.ATTENTION  # role() says OTHER for ops tagged random (dropout)
        if r in (Role.GEMM, Role.CONV, Role.ATTENTION):
            counter = {Role.GEMM: _gemm_flops, Role.CONV: _conv_flops}.get(r, _attention_flops)
            tensor_flops += counter(node)
            first = next((_val(a) for a in node.args if _val(a) is not None), None)
            if not tensor_dtype and first is not None:
                tensor_dtype = str(first.dtype).removeprefix("torch.")
        elif r is Role.POINTWISE:
            out = node.meta.get("val")
            other_flops += _numel(out if isinstance(out, torch.Tensor) else None)
        elif r is Role.REDUCTION:
            other_flops += _numel(_val(node.args[0]) if node.args else None)
    return Work(tensor_flops, other_flops, fewest_bytes(input_meta, output_meta), tensor_dtype)


def fewest_bytes(input_meta: Sequence[TensorMeta], output_meta: Sequence[TensorMeta]) -> int:
    """Inputs read once (an expanded, stride-0 dim holds one element) plus outputs written once."""
    total = 0
    for shape, stride, dtype in input_meta:
        unique = math.prod(s for s, st in zip(shape, stride, strict=True) if st != 0)
        total += unique * _itemsize(dtype)
    for shape, _, dtype in output_meta:
        total += math.prod(shape) * _itemsize(dtype)
    return total


def _itemsize(dtype: str) -> int:
    return int(getattr(torch, dtype).itemsize)


class SpeedOfLight:
    """Speed-of-light times from `Work` and measured `Ceilings`."""

    @staticmethod
    def time_ms(work: Work, ceilings: Ceilings, precision: str) -> float:
        compute_s = work.other_flops / ceilings.fp32_flops_per_s
        if work.tensor_flops:
            peak = ceilings.peak_flops_per_s(work.tensor_dtype, precision, tensor_op=True)
            compute_s += work.tensor_flops / peak
        memory_s = work.bytes / ceilings.dram_bytes_per_s
        return max(compute_s, memory_s) * 1e3

    @staticmethod
    def memory_bound_ms(work: Work, ceilings: Ceilings, precision: str) -> float | None:
        """The DRAM-bound time when moving the bytes takes longer than the math, else None."""
        memory_ms = work.bytes / ceilings.dram_bytes_per_s * 1e3
        return memory_ms if memory_ms >= SpeedOfLight.time_ms(work, ceilings, precision) else None

    @staticmethod
    def work(subgraph: Any) -> Work:
        return count_work(subgraph.nodes, subgraph.input_meta, subgraph.output_meta)

    @classmethod
    def for_subgraph(cls, subgraph: Any, ceilings: Ceilings) -> tuple[float, int, float]:
        """(flops, bytes, sol_ms) of a `Subgraph` on the device the ceilings were measured on."""
        work = cls.work(subgraph)
        return work.flops, work.bytes, cls.time_ms(work, ceilings, subgraph.precision)


def subgraph_cost(module: Any, inputs: list[Any]) -> tuple[float, float]:
    """(FLOPs, bytes): FLOPs of matmul/conv/attention ops as torch counts them (others count
    as one per output element); bytes of the external inputs and outputs, read/written once."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.no_grad():
        outputs = module(*inputs)
    tensors = [t for t in [*inputs, *outputs] if isinstance(t, torch.Tensor)]
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    elementwise = sum(t.numel() for t in outputs if isinstance(t, torch.Tensor))
    return float(max(counter.get_total_flops(), elementwise)), float(nbytes)
