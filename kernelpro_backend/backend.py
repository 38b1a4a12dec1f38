"""The `kernelpro` torch.compile backend.

Owns: the entry point `(gm, example_inputs, mode=, options=) -> callable`, reading options,
the AOTAutograd wiring (training: forward and backward graphs; inference: the inference graph),
the rewrite of each aten graph, and handing the rest to the fallback (Inductor or eager).
Must not: know how kernels are searched, cached or launched.

    torch.compile(model, backend="kernelpro")
    torch.compile(model, backend="kernelpro", options={"search": "on-miss", "fallback": "eager"})
    torch.compile(model, backend="kernelpro", options={"inductor_mode": "max-autotune"})
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.fx as fx

from .fx_passes.causal_mask import lower_triangular
from .fx_passes.input_strides import match_input_strides
from .fx_passes.linear_ce_rewrite import drop_autograd_kernel
from .fx_passes.mask_provenance import relied_masks
from .fx_passes.patterns import check_pattern_names
from .fx_passes.rng_outputs import zero_unset_rng_outputs
from .fx_passes.sdpa_mask import constant_outputs
from .fx_passes.small_table_grads import NAME as TABLE_GRADS
from .fx_passes.small_table_grads import one_hot_table_grads
from .fx_passes.torch_level import input_name
from .fx_passes.torch_rewrites import any_rewrite, placeholder_values, placeholders, torch_rewrites
from .ops import (
    cross_entropy,  # noqa: F401  (registers kernelpro::cross_entropy)
    cutlass_conv,  # noqa: F401  (registers kernelpro::cutlass_conv)
    cutlass_gemm,  # noqa: F401  (registers kernelpro::cutlass_gemm)
    linear_ce,  # noqa: F401  (registers kernelpro::linear_cross_entropy)
)
from .options import Options
from .rewrite.graph import RewriteReport, SubgraphObserver, copy_graph, graph_copy, rewrite_graph
from .rewrite.guarded import ValueGuarded, registering
from .rewrite.judged import Clock, Judging, default_clock, judge, symbolic
from .rewrite.providers import KernelProvider
from .tuner import default_provider
from .tuner.verdicts import graph_options_off, verdict_store, verdict_tolerance

log = logging.getLogger("kernelpro")

ProviderFactory = Callable[[Options], KernelProvider]


@functools.lru_cache(maxsize=1)
def _warn_no_cuda_once() -> None:
    log.warning(
        "no CUDA GPU here, so kernel search and cached GPU kernels are off; the model "
        "runs on the fallback only (Inductor or eager), with unchanged numerics"
    )


@functools.lru_cache(maxsize=1)
def _warn_graphs_without_inductor_once() -> None:
    log.warning(
        "cuda_graphs needs the Inductor fallback (Inductor's cudagraph trees replay "
        "the graphs); with fallback='eager' the graphs run op by op, not replayed"
    )


class CompileSession:
    """State of one torch.compile backend call: options, provider and what was rewritten."""

    def __init__(
        self,
        options: Options,
        provider: KernelProvider,
        observer: SubgraphObserver | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.options = options
        self.provider = provider
        self.observer = observer
        self.clock = clock  # times the in-context verdicts (None: CUDA events on CUDA graphs)
        self.replayed = False  # replayed as CUDA graphs: no verdict (both would be recorded)
        self.reports: list[RewriteReport] = []
        self.fingerprint = ""  # the dynamo graph's (graph_fingerprint), before any rewrite
        self.rewrites: dict[str, int] = {}  # torch-level rewrites made: name -> chains
        # Rewrite options a warm-up's in-context check turned off for this graph (its verdict).
        self.turned_off: dict[str, Any] = {}
        # Why the rewritten graph did not compile (it was compiled as written), or None.
        self.rewrite_error: str | None = None

    def rewrite(
        self,
        gm: fx.GraphModule,
        graph_kind: str,
        inline: bool | None = None,
        inputs: Sequence[Any] = (),
        only: frozenset[str] | None = None,
    ) -> RewriteReport:
        """Rewrite `gm` (recorded in `reports`; with `only`, a variant the in-context verdict
        times, with no kernel but those, not recorded). Tentative kernels go only into a graph
        that will be judged (its `inputs`)."""
        report = rewrite_graph(
            gm,
            graph_kind,
            self.provider,
            self.options.precision,
            self.observer,
            inline=self.options.inlines if inline is None else inline,
            fallback=self.options.fallback,
            dynamic=self.options.dynamic_shapes != "off",
            judged=only is not None or self.clock_for(inputs) is not None,
            only=only,
            rewrites=self.rewrites,
        )
        if only is None:
            self.reports.append(report)
        return report

    def clock_for(self, inputs: Sequence[Any]) -> Clock | None:
        """What times a graph's in-context verdict, or None where none is made (option off, no
        CUDA inputs, symbolic sizes, CUDA graphs)."""
        clock = self.clock or default_clock(inputs)
        if not self.options.in_context or clock is None or symbolic(inputs) or self.replayed:
            return None
        return clock

    def judging(
        self, untouched: fx.GraphModule, inputs: Sequence[Any], report: RewriteReport
    ) -> Judging | None:
        """The in-context verdict for a graph whose rewrite installed kernels (rewrite/judged.py),
        or None where none is made."""
        clock = self.clock_for(inputs)
        if clock is None or not report.replaced:
            return None
        store, tolerance = verdict_store(self.provider), verdict_tolerance(self.options)
        return judge(report, untouched.code, inputs, store, clock, self.options.budget_s, tolerance)

    def variant(self, untouched: fx.GraphModule, kind: str, kept: frozenset[str]) -> fx.GraphModule:
        """A copy of the graph with only the kernels `kept` (none: the fallback's own graph)."""
        gm = copy_graph(untouched)
        if kept:
            self.rewrite(gm, kind, only=kept)
        return gm


def _graph_kind(kwargs: Mapping[str, Any]) -> str:
    if kwargs.get("is_backward"):
        return "backward"
    if kwargs.get("is_inference"):
        return "inference"
    return "forward"


def _table_grads(session: CompileSession, graph: fx.GraphModule) -> None:
    """Small tables' accumulated gradients as one-hot GEMMs (fx_passes/small_table_grads.py),
    counted among the session's rewrites; none when the search is off (the fallback alone)."""
    if session.options.search != "off" and (made := one_hot_table_grads(graph)):
        session.rewrites[TABLE_GRADS] = session.rewrites.get(TABLE_GRADS, 0) + made


def _compile_inductor(
    session: CompileSession, gm: fx.GraphModule, example_inputs: Sequence[Any], mode: str | None
) -> Callable[..., Any]:
    from torch._inductor import list_mode_options
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    def inner_compile(graph: fx.GraphModule, inputs: Sequence[Any], **kwargs: Any) -> Any:
        kind = _graph_kind(kwargs)
        drop_autograd_kernel(graph)
        zero_unset_rng_outputs(graph)
        _table_grads(session, graph)
        match_input_strides(graph, inputs)
        untouched = copy_graph(graph)
        report = session.rewrite(graph, kind, inputs=inputs)
        judging = session.judging(untouched, inputs, report)
        try:
            if judging is None:
                return compile_fx_inner(graph, inputs, **kwargs)
            return judging.compile(
                lambda: compile_fx_inner(graph, inputs, **kwargs),
                lambda kept: compile_fx_inner(
                    session.variant(untouched, kind, kept), inputs, **kwargs
                ),
            )
        except Exception as e:
            if not report.replaced:
                raise  # the fallback's own graph: its error is the user's compile's
            # A bug to report, with this log: the user's compile goes on without it.
            session.reports.remove(report)
            _warn_compile_failed(kind, report, e)
        if report.inlined:
            # Compile again with every kernel behind kernelpro::launch.
            behind_op = copy_graph(untouched)
            op_report = session.rewrite(behind_op, kind, inline=False)
            try:
                return compile_fx_inner(behind_op, inputs, **kwargs)
            except Exception as e:
                session.reports.remove(op_report)
                _warn_compile_failed(kind, op_report, e)
        return compile_fx_inner(untouched, inputs, **kwargs)  # the fallback's own graph

    mode = session.options.inductor_mode  # torch.compile's mode=, or the inductor_mode option
    patches = dict(list_mode_options(mode)) if mode != "default" else {}
    if session.options.cuda_graphs:
        patches["triton.cudagraphs"] = True
    session.replayed = bool(patches.get("triton.cudagraphs"))
    # AOTAutograd's cache would hand back a compiled graph without calling inner_compile, so the
    # rewrite (and the kernel registry it fills) would be skipped: keep it off for our graphs.
    with torch._functorch.config.patch(enable_autograd_cache=False):
        return compile_fx(  # type: ignore[return-value]
            gm, list(example_inputs), inner_compile=inner_compile, config_patches=patches or None
        )


def _warn_compile_failed(kind: str, report: RewriteReport, error: Exception) -> None:
    how = "inlined" if report.inlined else "behind kernelpro::launch"
    then = "retrying with them behind kernelpro::launch" if report.inlined else (
        "compiling the graph without kernelpro's kernels"
    )  # fmt: skip
    log.warning(
        "Inductor failed on the %s graph with %d kernel(s) %s (%s: %s); %s",
        kind,
        len(report.replaced),
        how,
        type(error).__name__,
        str(error)[:500],
        then,
    )


def _compile_eager(
    session: CompileSession, gm: fx.GraphModule, example_inputs: Sequence[Any]
) -> Callable[..., Any]:
    from torch._functorch.aot_autograd import make_boxed_func
    from torch._inductor.compile_fx import compile_fx

    def inner_compile(graph: fx.GraphModule, inputs: Sequence[Any], **kwargs: Any) -> Any:
        drop_autograd_kernel(graph)
        zero_unset_rng_outputs(graph)
        _table_grads(session, graph)  # as under Inductor: warm-up collects keys here
        match_input_strides(graph, inputs)
        untouched, kind = copy_graph(graph), _graph_kind(kwargs)
        judging = session.judging(untouched, inputs, session.rewrite(graph, kind, inputs=inputs))
        if judging is None:
            return make_boxed_func(graph.forward)
        return judging.compile(
            lambda: make_boxed_func(graph.forward),
            lambda kept: make_boxed_func(session.variant(untouched, kind, kept).forward),
        )

    # Inductor's front half — its pre-grad and joint-graph passes, decompositions and
    # partitioner — then the graphs run as ATen ops, so both fallbacks see the same subgraphs
    # and cache keys. (A plain aot_autograd with Inductor's decompositions and partitioner
    # did not: Inductor's joint-graph passes rewrite the graph before it is partitioned, and
    # a cache warmed under one fallback missed under the other.)
    with torch._functorch.config.patch(enable_autograd_cache=False):
        compiled = compile_fx(gm, list(example_inputs), inner_compile=inner_compile)
    return compiled  # type: ignore[no-any-return,return-value]


def graph_fingerprint(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> str:
    """The identity of a dynamo graph across processes: its code and its inputs' shapes,
    dtypes and grad flags (a warm-up's verdicts on a whole graph are keyed by it)."""
    metas = [
        (tuple(str(d) for d in x.shape), str(x.dtype), x.requires_grad)
        if isinstance(x, torch.Tensor)
        else type(x).__name__
        for x in example_inputs
    ]
    return hashlib.sha256(f"{gm.code}\n{metas}".encode()).hexdigest()[:32]


def make_backend(
    provider: KernelProvider | ProviderFactory | None = None,
    observer: SubgraphObserver | None = None,
    sessions: list[CompileSession] | None = None,
    clock: Clock | None = None,
) -> Callable[..., Any]:
    """A backend callable with a given kernel provider (tests, explain, custom setups).
    `sessions`, if given, collects each compile's session (what was replaced); `clock`, if
    given, times the in-context verdicts on any device (tests)."""

    def backend(
        gm: fx.GraphModule,
        example_inputs: Sequence[Any],
        mode: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> Callable[..., Any]:
        opts = Options.resolve(mode=mode, options=options)
        check_pattern_names(opts.search_patterns)
        if opts.search != "off" and not torch.cuda.is_available():
            _warn_no_cuda_once()
        chosen = default_provider(opts, provider)
        fingerprint = graph_fingerprint(gm, example_inputs)
        verdicts = graph_options_off(opts, chosen, fingerprint)
        opts = dataclasses.replace(opts, **verdicts) if verdicts else opts
        session = CompileSession(opts, chosen, observer, clock)
        session.fingerprint, session.turned_off = fingerprint, verdicts
        # The torch-level fusions, before AOTAutograd; search="off" is the fallback alone.
        rewrites = opts.search != "off" and any_rewrite(opts)
        original = graph_copy(gm.graph) if rewrites else None
        relied: list[fx.Node] = []  # placeholders whose values a rewrite relied on
        if opts.search != "off":
            values = placeholder_values(gm, example_inputs)
            session.rewrites.update(torch_rewrites(gm, opts, values, relied))
        masks = relied_masks(gm)  # inputs relied on as masks an earlier graph proved constant
        if sessions is not None:
            sessions.append(session)
        if original is None or not any(session.rewrites.values()):
            return _compile(session, gm, example_inputs, mode)
        try:
            compiled = _compile(session, gm, example_inputs, mode)
            if not relied and not masks:
                return compiled
            return _value_guarded(
                compiled, gm, original, relied, masks, example_inputs, session, mode
            )
        except Exception as e:
            # A rewrite put an op in the graph that cannot be compiled or run here (SDPA under
            # an sdpa_kernel() context that allows none of its kernels): the graph as the user
            # wrote it compiles, without the rewrites, and the log says why.
            made = ", ".join(f"{name} ({n})" for name, n in session.rewrites.items() if n)
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            log.warning(
                "the graph with its torch-level rewrites [%s] failed to compile "
                "(%s: %s); compiling it as written, without them",
                made, type(e).__name__, first,
            )  # fmt: skip
            gm.graph = original
            gm.recompile()
            retry = CompileSession(opts, chosen, observer, clock)
            retry.fingerprint, retry.turned_off = fingerprint, verdicts
            retry.rewrites = {name: 0 for name in session.rewrites}
            retry.rewrite_error = f"{type(e).__name__}: {first}"
            if sessions is not None:
                sessions[sessions.index(session)] = retry
            return _compile(retry, gm, example_inputs, mode)

    return backend


def _value_guarded(
    compiled: Callable[..., Any],
    gm: fx.GraphModule,
    original: fx.Graph,
    relied: list[fx.Node],
    masks: Mapping[fx.Node, Any],
    example_inputs: Sequence[Any],
    first: CompileSession,
    mode: str | None,
) -> Callable[..., Any]:
    """`compiled`, called only while the inputs a rewrite relied on hold their values; else
    the graph as rewritten without relying on any value (compiled when first needed, with the
    first compile's options and provider). `relied`: the inputs holding causal buffers;
    `masks`: those holding masks an earlier graph proved constant, with what they were."""
    index = {node: i for i, node in enumerate(placeholders(gm))}
    fresh = graph_copy(original)

    def recompile() -> Callable[..., Any]:
        plain = fx.GraphModule(gm, fresh)
        session = CompileSession(first.options, first.provider, first.observer, first.clock)
        session.fingerprint = first.fingerprint
        session.rewrites.update(torch_rewrites(plain, first.options))
        return _compile(session, plain, example_inputs, mode)

    names = ", ".join(input_name(n) for n in relied)
    return ValueGuarded(
        compiled,
        example_inputs,
        [index[n] for n in relied],
        lower_triangular,
        recompile,
        f"the input(s) holding a causal mask ({names})",
        {index[n]: (fact, input_name(n)) for n, fact in masks.items()},
    )


def _compile(
    session: CompileSession, gm: fx.GraphModule, example_inputs: Sequence[Any], mode: str | None
) -> Callable[..., Any]:
    """`gm` compiled; its outputs proved constant masks registered on each call (what a graph
    after a break may rely on), except where CUDA graphs replay it (a replay's outputs live in
    a pool that later replays reuse, unseen by the version counter)."""
    outputs = constant_outputs(gm) if session.options.rewrite_attention else {}
    if session.options.fallback == "eager":
        if session.options.cuda_graphs:
            _warn_graphs_without_inductor_once()
        return registering(_compile_eager(session, gm, example_inputs), outputs)
    compiled = _compile_inductor(session, gm, example_inputs, mode)
    return compiled if session.replayed else registering(compiled, outputs)


# The registered backend (entry point `torch_dynamo_backends: kernelpro`).
kernelpro = make_backend()
