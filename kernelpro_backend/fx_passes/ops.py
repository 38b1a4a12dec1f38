"""Classification of aten graph nodes into the roles the partitioner fuses around.

Owns: which aten/prims ops are anchors (GEMM, convolution), attention, reductions, pointwise,
views, constant factories and row gathers (cat and slice_scatter count as pointwise: PIECEWISE),
and what a reduction (or row gather) reduces over;
which views move elements to other indices (REINDEXING_VIEWS), which pointwise ops copy
(COPIES), a node's element count (`numel`) and a reduction's input's (`reduced_numel`).
Must not: group nodes (partition.py does) or look at anything but one node.
"""

from __future__ import annotations

import enum
import math
import operator
from collections.abc import Sequence

import torch
import torch.fx as fx


class Role(enum.Enum):
    GEMM = "gemm"  # mm, bmm, addmm, baddbmm
    CONV = "conv"  # convolution and its backward
    ATTENTION = "attention"  # scaled-dot-product attention, forward and backward
    REDUCTION = "reduction"  # reductions, norms, softmax, losses
    POINTWISE = "pointwise"
    VIEW = "view"  # layout-only: view, reshape, permute, expand, select, ...
    FACTORY = "factory"  # constants made from nothing: full, scalar_tensor, arange
    GETITEM = "getitem"  # picks one output of a multi-output op
    # one element per row of the last dim (cross-entropy's logp.gather(-1, t[:, None])): fusable
    # into the row-reduction group that produces its source, as a masked reduction there
    ROW_GATHER = "row_gather"
    OTHER = "other"  # not fusable: other gathers, scatter/index, random, mutation, unknown


_GEMM = {"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm"}
_CONV = {"aten::convolution", "aten::_convolution", "aten::convolution_backward"}
_REDUCTION = {
    "aten::sum",
    "aten::mean",
    "aten::amax",
    "aten::amin",
    "aten::max",
    "aten::min",
    "aten::argmax",
    "aten::argmin",
    "aten::prod",
    "aten::var",
    "aten::var_mean",
    "aten::std",
    "aten::logsumexp",
    "aten::_softmax",
    "aten::_log_softmax",
    "aten::_softmax_backward_data",
    "aten::_log_softmax_backward_data",
    "aten::native_layer_norm",
    "aten::native_layer_norm_backward",
    "aten::native_group_norm",
    "aten::native_group_norm_backward",
    "aten::_fused_rms_norm",
    "aten::_fused_rms_norm_backward",
    "aten::nll_loss_forward",
    "aten::nll_loss_backward",
}
# Ops that behave pointwise but carry no pointwise tag.
_EXTRA_POINTWISE = {"aten::_to_copy", "prims::fma", "prims::convert_element_type"}
# Pointwise by pieces: each output element is one element of one input, which input depends
# on the element's coordinate along one dim (a cat; a slice_scatter over its base): RoPE's
# rotate_half and its backward. lowering/pieces.py maps them.
PIECEWISE = {"aten::cat", "aten::slice_scatter"}
_FACTORY = {
    "aten::full",
    "aten::scalar_tensor",
    "aten::zeros",
    "aten::ones",
    "aten::arange",
    "prims::iota",  # the column index a one-hot (cross-entropy's gradient) compares with
}
_VIEW_EXTRA = {"aten::reshape", "aten::_unsafe_view"}
_ATTENTION_PREFIXES = (
    "aten::_scaled_dot_product",
    "aten::_flash_attention",
    "aten::_efficient_attention",
    "aten::scaled_dot_product",
)


def op_name(node: fx.Node) -> str:
    """The op's schema name without overload ('aten::addmm'), or '' for non-aten targets."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.name
    if isinstance(target, torch._ops.OpOverloadPacket):
        return target._qualified_op_name
    return ""


def is_attention_op(node: fx.Node) -> bool:
    """Whether `node` calls a scaled-dot-product attention op (any variant, forward or
    backward), dropout or not: `role` calls one with dropout OTHER, this does not."""
    return op_name(node).startswith(_ATTENTION_PREFIXES)


def role(node: fx.Node) -> Role:
    if node.op != "call_function":
        return Role.OTHER
    if node.target is operator.getitem:
        return Role.GETITEM
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return Role.OTHER
    name = target._schema.name
    tags = set(target.tags)
    if name.startswith(_ATTENTION_PREFIXES):
        # SDPA ops carry the nondeterministic tag for their dropout; without dropout they are
        # deterministic and fusable.
        return Role.ATTENTION if _dropout_p(node) == 0.0 else Role.OTHER
    if target._schema.is_mutable or torch.Tag.nondeterministic_seeded in tags:
        return Role.OTHER
    if name in _GEMM:
        return Role.GEMM
    if name in _CONV:
        return Role.CONV
    if name in _REDUCTION:
        return Role.REDUCTION
    if name in _FACTORY:
        return Role.FACTORY
    if name == "aten::gather" and row_gather_signature(node) is not None:
        return Role.ROW_GATHER
    if name == "aten::_to_copy" and _changes_device(node):
        return Role.OTHER
    if torch.Tag.pointwise in tags or name in _EXTRA_POINTWISE or name in PIECEWISE:
        return Role.POINTWISE
    if target.is_view or name in _VIEW_EXTRA:
        return Role.VIEW
    return Role.OTHER


def _dropout_p(node: fx.Node) -> float | None:
    """The dropout probability an attention op was called with (0 when it takes none)."""
    assert isinstance(node.target, torch._ops.OpOverload)
    for i, arg in enumerate(node.target._schema.arguments):
        if arg.name == "dropout_p":
            value = node.kwargs.get("dropout_p", node.args[i] if i < len(node.args) else 0.0)
            return float(value) if isinstance(value, (int, float)) else None
    return 0.0


def _changes_device(node: fx.Node) -> bool:
    device = node.kwargs.get("device")
    src = tensor_value(node.args[0]) if node.args else None
    if not isinstance(device, (str, torch.device)) or src is None:
        return False
    return torch.device(device) != src.device


def tensor_value(arg: object) -> torch.Tensor | None:
    """A node's fake (or real) tensor value, `meta["val"]`; None for anything else."""
    if isinstance(arg, fx.Node):
        val = arg.meta.get("val")
        if isinstance(val, torch.Tensor):
            return val
    return None


# Views through which an element sits at another index than in their source: a part of it
# (select, slice, narrow, unbind, as_strided) or its dims reordered (permute, transpose).
# View/reshape/unsqueeze keep each element's linear index. And the pointwise ops that copy.
REINDEXING_VIEWS = {
    "aten::select", "aten::slice", "aten::narrow", "aten::unbind", "aten::as_strided",
    "aten::permute", "aten::transpose",
}  # fmt: skip
COPIES = {"aten::clone", "aten::_to_copy", "prims::convert_element_type"}


def numel(node: fx.Node | None) -> int | None:
    """Elements of a node's tensor output; None when unknown or symbolic."""
    val = tensor_value(node)
    if val is None or not all(isinstance(d, int) for d in val.shape):
        return None
    return math.prod(val.shape)


def reduced_numel(node: fx.Node) -> int | None:
    """Elements a reduction reads (its input's); None when unknown or symbolic."""
    sig = reduction_signature(node)
    return math.prod(sig[0]) if sig is not None else None


def tensor_inputs(node: fx.Node) -> list[fx.Node]:
    """The nodes this node reads (flattened over args and kwargs), in argument order."""
    return list(node.all_input_nodes)


def reduction_signature(node: fx.Node) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(input shape, reduced dims) of a reduction, with dims made non-negative; None when unknown.

    Two reductions with the same signature reduce the same rows, so they belong to one
    normalisation/softmax chain (e.g. the amax and the sum of a softmax)."""
    if not node.args:
        return None
    src = tensor_value(node.args[0])
    if src is None:
        return None
    if not all(isinstance(s, int) for s in src.shape):
        return None  # symbolic sizes (and int() on them would specialise them)
    shape = tuple(src.shape)
    rank = len(shape)
    name = op_name(node)
    dims: Sequence[int] | None
    if name in ("aten::_softmax", "aten::_log_softmax"):
        dims = [node.args[1]]  # type: ignore[list-item]
    elif name in ("aten::_softmax_backward_data", "aten::_log_softmax_backward_data"):
        dims = [node.args[2]]  # type: ignore[list-item]
    elif name in ("aten::native_layer_norm", "aten::_fused_rms_norm"):
        normalized = node.args[1]
        dims = list(range(rank - len(normalized), rank))  # type: ignore[arg-type]
    elif name in ("aten::nll_loss_forward", "aten::native_group_norm"):
        dims = list(range(rank))
    else:
        raw = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        if raw is None:
            dims = list(range(rank))
        elif isinstance(raw, int):
            dims = [raw]
        elif isinstance(raw, (list, tuple)) and all(isinstance(d, int) for d in raw):
            dims = list(raw) if raw else list(range(rank))
        else:
            return None
    if rank == 0:
        return shape, ()
    return shape, tuple(sorted({d % rank for d in dims}))


def row_gather_signature(node: fx.Node) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(source shape, (last dim,)) of `gather(src, dim, index)` when it picks one element per row
    of the last dim: `dim` is the last dim and `index` has size 1 there and src's sizes elsewhere.
    That is the signature of the row reduction over `src`'s last dim, so the gather can join the
    group whose rows it reads. None for every other gather (other dims, wider or broadcast-smaller
    indices, sparse gradients, symbolic sizes)."""
    if op_name(node) != "aten::gather" or len(node.args) < 3 or node.kwargs.get("sparse_grad"):
        return None
    src, dim, index = tensor_value(node.args[0]), node.args[1], tensor_value(node.args[2])
    if src is None or index is None or not isinstance(dim, int) or src.dim() == 0:
        return None
    sizes = (*src.shape, *index.shape)
    if not all(isinstance(s, int) for s in sizes) or index.dim() != src.dim():
        return None
    rank = src.dim()
    if dim % rank != rank - 1 or index.shape[-1] != 1:
        return None
    if tuple(index.shape[:-1]) != tuple(src.shape[:-1]):
        return None
    return tuple(src.shape), (rank - 1,)
