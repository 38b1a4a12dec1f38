"""The rewrite: replace subgraphs that have a kernel by the kernel's launches.

Owns: asking the provider for each subgraph of an aten graph, registering the kernels found,
and editing the graph so the rest of it can go to the fallback compiler unchanged. With
`inline=True` (Inductor fallback) a traceable kernel is traced into the graph (inline.py) so
Inductor launches it from its generated code; anything else becomes one `kernelpro::launch` node.
Must not: search, time or compile kernels.
"""

from __future__ import annotations

import copy
import dataclasses
import heapq
import logging
import operator
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import unset_fake_temporarily

from ..fx_passes import Subgraph, find_subgraphs
from ..fx_passes.concrete import ConcretizeError, hint_sizes, instance
from ..lowering.split import split_refused
from .dispatch import DISPATCHERS, ShapeDispatcher
from .inline import InlineError, TraceableKernel, splice, trace_kernel
from .launch import KERNELS, RegisteredKernel
from .providers import IsolatedMs, KernelProvider, isolated_figures

log = logging.getLogger("kernelpro")

SubgraphObserver = Callable[[str, Sequence[Subgraph]], None]


@dataclasses.dataclass
class RewriteReport:
    graph: str
    subgraphs: int = 0
    replaced: list[str] = dataclasses.field(default_factory=list)  # kernel ids
    inlined: list[str] = dataclasses.field(default_factory=list)  # kernel ids traced in
    symbolic: int = 0  # subgraphs with symbolic sizes left to the fallback
    dispatched: list[str] = dataclasses.field(default_factory=list)  # behind a dispatcher
    # The in-context verdict on the graph with its kernels (judged.py): "" (none made),
    # "judging" (its first calls take turns), "kept" (all), "partial" (some) or "dropped".
    in_context: str = ""
    verdict: dict[str, Any] | None = None  # its figures (verdict_plan.Outcome.record)
    dropped: list[str] = dataclasses.field(default_factory=list)  # kernel ids it dropped
    # kernel id -> its figures and its fallback's as its search timed them alone, where known
    isolated: dict[str, IsolatedMs] = dataclasses.field(default_factory=dict)

    by: list[str] = dataclasses.field(default_factory=list)  # "pattern by kernel", as replaced

    def summary(self, rewrites: Mapping[str, int] | None = None) -> str:
        """One line for the log: the subgraphs, how many were replaced and by what, what kept
        the fallback for want of static sizes, and the torch-level rewrites made before."""
        line = f"{self.graph} graph: {self.subgraphs} subgraphs, {len(self.replaced)} replaced"
        if self.inlined:
            line += f" ({len(self.inlined)} inlined)"
        if self.by:
            line += ": " + ", ".join(f"{n}x {w}" if n > 1 else w
                                     for w, n in Counter(self.by).items())  # fmt: skip
        if self.symbolic:
            line += f"; {self.symbolic} with symbolic sizes left to the fallback"
        made = [f"{name} {n}" for name, n in (rewrites or {}).items() if n]
        return line + (f"; torch-level rewrites: {', '.join(made)}" if made else "")


def copy_graph(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of `gm` whose nodes (meta shared shallowly) the rewrite can edit independently."""
    graph = fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    old_output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    graph.output(out).meta = dict(old_output.meta)
    return fx.GraphModule(gm, graph)


def graph_copy(graph: fx.Graph) -> fx.Graph:
    """A copy of `graph` to compile if its rewritten self fails: its own nodes (their meta
    shallow-copied) with every attribute Dynamo set on the originals (a placeholder's
    `_dynamo_source`, which AOTAutograd reads)."""
    new = copy.deepcopy(graph)
    for old, node in zip(graph.nodes, new.nodes, strict=True):
        for key, value in vars(old).items():
            if key not in vars(node):
                setattr(node, key, value)
    return new


def kernel_id(subgraph: Subgraph, kernel_name: str) -> str:
    return f"{subgraph.key.digest[:24]}/{kernel_name}"


def _replace(
    gm: fx.GraphModule, subgraph: Subgraph, kid: str, remap: dict[fx.Node, fx.Node]
) -> None:
    """Replace one subgraph; `remap` maps outputs of subgraphs replaced earlier to the
    getitem nodes that now stand for them (this subgraph may read them). A symbolic subgraph
    (kid "dyn/...") goes behind its shape dispatcher, its size inputs passed apart."""
    graph = gm.graph
    members = set(subgraph.nodes)
    order = {n: i for i, n in enumerate(graph.nodes)}
    last = max(subgraph.nodes, key=order.__getitem__)
    inputs = [remap.get(p, p) for p in subgraph.inputs]
    target: Any = torch.ops.kernelpro.launch.default
    args: tuple[Any, ...] = (kid, inputs)
    if kid.startswith(DYNAMIC_PREFIX):
        tensors = [n for p, n in zip(subgraph.inputs, inputs, strict=True) if _is_tensor(p)]
        sizes = [n for p, n in zip(subgraph.inputs, inputs, strict=True) if not _is_tensor(p)]
        target, args = torch.ops.kernelpro.dispatch.default, (kid, tensors, sizes)
    with graph.inserting_after(last):
        call = graph.call_function(target, args)
    call.meta["val"] = [o.meta["val"] for o in subgraph.outputs]
    for i, out in enumerate(subgraph.outputs):
        with graph.inserting_after(call):
            item = graph.call_function(operator.getitem, (call, i))
        item.meta["val"] = out.meta["val"]
        if "tensor_meta" in out.meta:
            item.meta["tensor_meta"] = out.meta["tensor_meta"]
        out.replace_all_uses_with(item, delete_user_cb=lambda user: user not in members)
        remap[out] = item
    for n in reversed(subgraph.nodes):
        graph.erase_node(n)


def _is_tensor(node: fx.Node) -> bool:
    return isinstance(node.meta.get("val"), torch.Tensor)


DYNAMIC_PREFIX = "dyn/"


def _dispatcher(subgraph: Subgraph, provider: KernelProvider, fallback: str) -> str | None:
    """The id of a shape dispatcher for a symbolic subgraph whose sizes at compile time (its
    hints) get a kernel, or whose other sizes have kernels in the cache (the provider's
    `family_known`), registered; None leaves the subgraph to the fallback at every size."""
    find = getattr(provider, "find_dynamic", provider.find)
    try:
        dispatcher = ShapeDispatcher(subgraph, find, fallback)
        sizes = hint_sizes(subgraph.inputs)
    except ConcretizeError as e:
        log.info("%s %s stays with the fallback: %s", subgraph.graph, subgraph.pattern, e)
        return None
    with unset_fake_temporarily():
        route = dispatcher.route(sizes)
    known = getattr(provider, "family_known", None)
    if route.kernel is None and not (known is not None and known(dispatcher.family)):
        return None  # no kernel at these sizes, nor at any other the cache knows
    did = f"{DYNAMIC_PREFIX}{dispatcher.family[:24]}"
    DISPATCHERS.register(did, dispatcher)
    return did


def _hint_instances(subgraphs: Sequence[Subgraph]) -> list[Subgraph]:
    """The static instances, at their hints, of the symbolic subgraphs that can have one."""
    found = []
    for sg in subgraphs:
        if sg.dynamic:
            try:
                found.append(instance(sg, hint_sizes(sg.inputs)).subgraph)
            except ConcretizeError:
                continue
    return found


def _trace(kernel: object, subgraph: Subgraph, kid: str) -> fx.GraphModule | None:
    """The kernel traced into FX nodes, or None when it must go through the opaque op."""
    if not isinstance(kernel, TraceableKernel):
        return None
    try:
        return trace_kernel(kernel, subgraph)
    except InlineError as e:
        log.warning(
            "cannot inline kernel %s for %s %s (%s); launching it through "
            "kernelpro::launch instead, which costs host time per call",
            kid,
            subgraph.graph,
            subgraph.pattern,
            e,
        )
        return None


def stable_topological_order(graph: fx.Graph) -> None:
    """Reorder `graph` so every node follows its inputs, moving as little as possible: among
    the nodes whose inputs are placed, the one that came first goes next. So the output stays
    last and side effects (an input mutation's `copy_`, which has no users) keep their place
    after the reads before them — `legalize_graph`'s plain topological sort put `return`
    before a BatchNorm's running-stat updates, which Inductor refuses."""
    nodes = list(graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    waiting = {n: len(set(n.all_input_nodes)) for n in nodes}
    ready = [index[n] for n in nodes if waiting[n] == 0]
    heapq.heapify(ready)
    order: list[fx.Node] = []
    while ready:
        node = nodes[heapq.heappop(ready)]
        order.append(node)
        for user in node.users:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, index[user])
    if len(order) != len(nodes):
        raise RuntimeError("kernelpro: the rewritten graph has a cycle")
    for before, node in zip(order, order[1:], strict=False):
        if node.prev is not before:
            before.append(node)


_warned_symbolic = False


def _note_symbolic(count: int, graph_kind: str) -> None:
    """Symbolic subgraphs without a kernel at their compile-time sizes keep the fallback; the
    first time, say how to give them kernels."""
    global _warned_symbolic
    log.info(
        "%d %s subgraph(s) with symbolic sizes (dynamic shapes) have no kernel at "
        "their compile-time sizes and stay with the fallback",
        count,
        graph_kind,
    )
    if not _warned_symbolic:
        _warned_symbolic = True
        log.warning(
            "a graph has symbolic sizes (torch.compile makes sizes dynamic after a "
            "shape changes) and %d of its subgraphs have no kernel at the sizes it was compiled "
            "at, so they run on the fallback at every size. Warm the sizes the model will see "
            "up first: `kernelpro warmup MODULE:FN --dynamic DIM=LOW:HIGH` or "
            "kernelpro_backend.warmup.warmup(model, inputs, more_inputs=[...]); or compile "
            "with dynamic=False for one graph per shape",
            count,
        )


def rewrite_graph(
    gm: fx.GraphModule,
    graph_kind: str,
    provider: KernelProvider,
    precision_option: str = "auto",
    observer: SubgraphObserver | None = None,
    inline: bool = False,
    fallback: str = "inductor",
    dynamic: bool = True,
    judged: bool = False,
    only: frozenset[str] | None = None,
    rewrites: Mapping[str, int] | None = None,
) -> RewriteReport:
    """Partition `gm`, ask `provider` for each subgraph, replace those that get a kernel.
    With `dynamic`, a symbolic subgraph whose hint sizes get a kernel goes behind a shape
    dispatcher (dispatch.py) whose miss path is the subgraph compiled by `fallback`. A tentative
    kernel (IsolatedMs) goes only into a graph to be `judged`; `only`: no kernel but those ids.
    Logs one INFO line per graph (`RewriteReport.summary`, with the torch-level `rewrites`
    made on the Dynamo graph it came from)."""
    # a group that needs a value at two index maps is cut where its parts lower
    subgraphs = split_refused(find_subgraphs(gm, graph_kind, precision_option), precision_option)
    if observer is not None:
        observer(graph_kind, subgraphs)
    report = RewriteReport(graph=graph_kind, subgraphs=len(subgraphs))
    prepare = getattr(provider, "prepare", None)
    if prepare is not None and only is None:  # a variant's kernels were all found before
        # A provider that decides for all of a graph's subgraphs at once (the distributed
        # finder agrees on them with the other ranks) sees them before the first `find`.
        with unset_fake_temporarily():
            static = [sg for sg in subgraphs if not sg.symbolic and sg.inputs]
            prepare(static + (_hint_instances(subgraphs) if dynamic else []))
    chosen: list[tuple[Subgraph, str, fx.GraphModule | None]] = []
    for sg in subgraphs:
        if sg.symbolic:
            did = _dispatcher(sg, provider, fallback) if dynamic and sg.dynamic else None
            if did is not None:
                chosen.append((sg, did, None))
                report.dispatched.append(did)
                report.by.append(f"{sg.pattern} by a shape dispatcher")
            elif not sg.tuple_output:  # a tuple output is no matter of sizes
                report.symbolic += 1
            continue
        if not sg.inputs:
            continue
        with unset_fake_temporarily():
            kernel = provider.find(sg)
        if kernel is None:
            continue
        kid = kernel_id(sg, kernel.name)
        figures = isolated_figures(provider, sg)
        if (only is not None and kid not in only) or (
            figures is not None and figures.tentative and not judged
        ):
            continue
        if figures is not None:
            report.isolated[kid] = figures
        KERNELS.register(
            kid,
            RegisteredKernel(kernel=kernel, outputs=sg.output_meta, device_type=sg.device.type),
        )
        traced = _trace(kernel, sg, kid) if inline else None
        chosen.append((sg, kid, traced))
        report.by.append(f"{sg.pattern} by {kernel.name}")
    remap: dict[fx.Node, fx.Node] = {}
    for sg, kid, traced in chosen:
        if traced is not None:
            splice(gm, sg, traced, remap)
            report.inlined.append(kid)
        else:
            _replace(gm, sg, kid, remap)
        report.replaced.append(kid)
    if chosen:
        stable_topological_order(gm.graph)
        gm.graph.lint()
        gm.recompile()
    if report.symbolic:
        _note_symbolic(report.symbolic, graph_kind)
    log.info("%s", report.summary(rewrites))
    return report
