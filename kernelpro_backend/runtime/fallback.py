"""How the fallback runs a subgraph inside its whole graph, so that its baselines are timed so.

A worker compiles a subgraph's Inductor baseline from the subgraph alone, in a fresh process.
Left to itself there, Inductor decided as it would for a graph of a few nodes, not as it does
for the user's graph:
- channels-last or not (GraphLowering.decide_layout_opt) is decided per graph — no conv, a
  grouped conv, a conv with fewer out than in channels, fewer than one conv per 300 nodes, the
  inference FLOP weights — so a conv alone could go channels-last where its graph does not, or
  the other way;
- in a channels-last graph the conv's activations arrive channels-last and its output stays so;
  alone, its inputs carry the aten graph's NCHW strides and its outputs are returned at them:
  a copy to NHWC and one back on every call. ResNet-50's float32 1x1 reduce conv
  [128,256,56,56] compiled alone took 0.520 ms against eager cuDNN's 0.177 (H100, 2026-12-06,
  docs/gpu_runs/2026-12-06-conv-sweep/probe.py);
- the worker's Inductor config is its defaults, not the mode the user compiled with
  (mode="max-autotune", options inductor_mode) or a config the user set;
- cuDNN's algorithm choice follows `cudnn.benchmark` and `cudnn.deterministic` of the process.

Owns: `FallbackSettings` (plain data a Job carries: Inductor's options as the user's process
has them with the whole graph's layout decision, the strides Inductor gives the subgraph's
inputs in the graph, the cuDNN flags), read in the user's process by `FallbackSettings.of`
when a subgraph's job is made; `layout_decision` (Inductor's own rule, on the whole graph).
Must not: compile, run or time anything (candidate.py compiles the baseline with these options;
worker.py applies the cuDNN flags through precision.py).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx as fx

log = logging.getLogger("kernelpro")

TensorMeta = tuple[tuple[int, ...], tuple[int, ...], str]

# Inductor settings that change the code it generates for a graph, read from the user's process
# (inside compile_fx, the mode's patches are in force). Not triton.cudagraphs: the worker times
# short kernels as CUDA-graph replays itself (timing.py), and a baseline's replays must not be
# recorded twice. Keys this torch lacks are left out.
INDUCTOR_KEYS = (
    "max_autotune",
    "max_autotune_gemm",
    "max_autotune_pointwise",
    "max_autotune_gemm_backends",
    "max_autotune_conv_backends",
    "coordinate_descent_tuning",
    "epilogue_fusion",
    "pattern_matcher",
    "shape_padding",
    "comprehensive_padding",
    "pad_outputs",
    "conv_1x1_as_mm",
    "split_reductions",
)


@dataclasses.dataclass(frozen=True)
class FallbackSettings:
    """What the fallback's run of a subgraph depends on beyond the subgraph itself."""

    # torch.compile(..., options=dict(inductor)) for the Inductor baseline; () leaves the
    # worker's defaults (a job made outside a graph)
    inductor: tuple[tuple[str, Any], ...] = ()
    # the inputs' strides where Inductor lays them channels-last in the graph (its intermediate
    # activations of a channels-last graph); None: as the subgraph's input_meta
    graph_input_meta: tuple[TensorMeta, ...] | None = None
    cudnn_benchmark: bool = False
    cudnn_deterministic: bool = False
    # the strides the graph needs the outputs at when a kernel, not Inductor, makes them: in a
    # channels-last graph a convolution reads its activations NHWC and Inductor lays a
    # convolution's output NHWC, so an NCHW output of a kernel is converted on its way there;
    # None: as the output_meta
    graph_output_meta: tuple[TensorMeta, ...] | None = None

    @classmethod
    def of(cls, subgraph: Any) -> FallbackSettings:
        """As the user's process runs `subgraph`'s fallback now: its cuDNN flags, its Inductor
        config, and the layout Inductor decides for the whole graph the subgraph's nodes are in."""
        flags = cls(
            cudnn_benchmark=bool(torch.backends.cudnn.benchmark),
            cudnn_deterministic=bool(torch.backends.cudnn.deterministic),
        )
        nodes: Sequence[fx.Node] = getattr(subgraph, "nodes", ())
        if not nodes:
            return flags
        try:
            inductor, laid, laid_out = _in_graph(subgraph, nodes[0].graph)
        except Exception as e:  # Inductor internals of another version: the worker decides
            log.debug("no in-graph layout for %s: %s", subgraph.pattern, e)
            return flags
        return dataclasses.replace(
            flags, inductor=inductor, graph_input_meta=laid, graph_output_meta=laid_out
        )


Metas = tuple[TensorMeta, ...] | None


def _in_graph(subgraph: Any, graph: fx.Graph) -> tuple[tuple[tuple[str, Any], ...], Metas, Metas]:
    """Inductor's options for `subgraph` as in `graph`, its inputs' strides there and the
    strides the graph needs its outputs at from a kernel (None: as the subgraph's own)."""
    import torch._inductor.config as config

    options = {k: getattr(config, k) for k in INDUCTOR_KEYS if hasattr(config, k)}
    channels_last = layout_decision(graph, subgraph.graph == "inference")
    # Forced either way: alone, Inductor would decide again on a graph of a few nodes.
    options.update(layout_optimization=channels_last, force_layout_optimization=channels_last)
    metas = outs = None
    if channels_last:
        prefer = _prefer_channels_last(graph)
        laid = tuple(_laid(p, p in prefer) for p in subgraph.inputs)
        metas = laid if laid != tuple(subgraph.input_meta) else None
        # Outputs the graph keeps as intermediates stay in Inductor's layout, as in the graph;
        # one the graph returns is copied back to its strides there too.
        returned = any(u.op == "output" for o in subgraph.outputs for u in o.users)
        options["keep_output_stride"] = returned or not all(o in prefer for o in subgraph.outputs)
        # A convolution's output (or its epilogue's) is laid NHWC wherever it goes next in
        # Inductor's channels-last set, unless the user sees it: a kernel's NCHW output is
        # converted on the way (a copy, or cuDNN's nchwToNhwc in the convolutions it reaches).
        # Other 4-D values of the set (a GEMM's output viewed [N, H, W, C]) are left as made.
        members, visible = set(subgraph.nodes), _user_visible(graph)
        conv_made = {_shape(n) for n in members if n.target is torch.ops.aten.convolution.default}
        needed = tuple(
            _laid(
                o,
                (o in prefer and o not in visible and _shape(o) in conv_made)
                or _conv_reads(o, members),
            )
            for o in subgraph.outputs
        )
        outs = needed if needed != tuple(subgraph.output_meta) else None
    return tuple(sorted(options.items())), metas, outs


# Inductor's lowerings of these require their activations channels-last in a channels-last
# graph (kernel/conv.py: ExternKernel.require_channels_last), whatever their producer made.
_CHANNELS_LAST_READERS = (
    torch.ops.aten.convolution.default,
    torch.ops.aten.convolution_backward.default,
)


def _shape(node: fx.Node) -> tuple[Any, ...] | None:
    val = node.meta.get("val")
    return tuple(val.shape) if isinstance(val, torch.Tensor) else None


def _user_visible(graph: fx.Graph) -> set[fx.Node]:
    """The values `graph` returns to the user (AOTAutograd's forward returns the saved
    activations beside them; Inductor marks which are the user's in the output node's
    `user_visible_output_idxs`). Where unmarked, every value it returns."""
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    returned = output.args[0] if isinstance(output.args[0], (list, tuple)) else output.args
    marked = output.meta.get("user_visible_output_idxs")
    return {
        v
        for i, v in enumerate(returned)
        if isinstance(v, fx.Node) and (marked is None or i in marked)
    }


def _conv_reads(node: fx.Node, members: set[fx.Node]) -> bool:
    """Whether a convolution outside the subgraph reads `node`."""
    return any(u not in members and u.target in _CHANNELS_LAST_READERS for u in node.users)


def layout_decision(graph: fx.Graph, inference: bool) -> bool:
    """Whether Inductor lays `graph`'s convolutions channels-last: its own rule
    (GraphLowering.decide_layout_opt) on the whole graph, under the config in force here."""
    import torch._inductor.config as config

    convs = any(n.target is torch.ops.aten.convolution.default for n in graph.nodes)
    if not convs or not config.layout_optimization:
        return bool(config.layout_optimization and config.force_layout_optimization)
    from torch._inductor.graph import GraphLowering

    return bool(GraphLowering.decide_layout_opt(_Holder(graph), is_inference=inference))  # type: ignore[arg-type]


class _Holder:
    """What Inductor's layout rules read of a GraphLowering and its module: `.graph`, `.module`."""

    def __init__(self, graph: fx.Graph) -> None:
        self.graph = graph
        self.module = self


def _prefer_channels_last(graph: fx.Graph) -> set[fx.Node]:
    """The nodes Inductor lays channels-last in a channels-last graph (its own rule)."""
    from torch._inductor.graph import GraphLowering

    return set(GraphLowering.find_nodes_prefer_channels_last(_Holder(graph)))  # type: ignore[arg-type]


def _laid(node: fx.Node, channels_last: bool) -> TensorMeta:
    """`node`'s meta as Inductor lays it: channels-last for a dense 4-D tensor the graph makes
    (a graph input arrives as the caller made it), else its own strides."""
    from ..fx_passes.keys import tensor_meta

    shape, stride, dtype = tensor_meta(node)
    val = node.meta.get("val")
    dense = isinstance(val, torch.Tensor) and (
        val.is_contiguous() or val.is_contiguous(memory_format=torch.channels_last)
    )
    if channels_last and node.op != "placeholder" and len(shape) == 4 and dense:
        stride = tuple(torch._prims_common.make_channels_last_strides_for(shape))
    return shape, stride, dtype
