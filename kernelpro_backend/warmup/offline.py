"""Offline warm-up: find every subgraph of a model (forward and backward) and search the ones
the cache lacks, so that later runs (search="cache-only") start fast.

Owns: `warmup(model, example_inputs, ...)` and its summary, and `search_provider` (the
provider, its workers booting before the model is built). Every winner is stored as soon as
its search ends (the cache provider does that), so an interrupted warm-up loses no finished
work: running it again searches only what is still missing. Under distributed search the
ranks agree on a whole step's subgraphs (forward and backward, found first) in one round.
Must not: search or cache by itself (tuner/ assembles the provider that does). When it ends, no
worker process holds GPU memory (the pool is shut down).
"""

from __future__ import annotations

import copy
import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..backend import make_backend
from ..fx_passes import Subgraph
from ..fx_passes.patterns import check_pattern_names
from ..options import Options
from ..rewrite.providers import Kernel, KernelProvider
from ..runtime.fallback import layout_decision
from ..tuner.plan import SearchPlan
from .planned import plan_summary, progress, warm_planned
from .report import Phases, WarmupReport
from .rows import WarmupRow, _Recording

log = logging.getLogger("kernelpro.warmup")


def warmup_options(options: dict[str, Any] | None, budget_s: float | None) -> dict[str, Any]:
    """A warm-up's backend options: `options` with search on a miss and the budget."""
    opts = dict(options or {})
    opts.setdefault("search", "on-miss")
    # The warm-up judges its kernels in the whole step (incontext.py), not graph by graph.
    opts["in_context"] = False
    if budget_s is not None:
        opts["budget_s"] = budget_s
    return opts


def search_provider(options: dict[str, Any]) -> KernelProvider:
    """The provider a warm-up searches with (the cache, search on a miss, shared across the
    ranks under torch.distributed), its worker pool already booting: a caller that builds the
    model after this call overlaps the pool's start (~10-15 s) with that."""
    resolved = Options.resolve(options=options)
    check_pattern_names(resolved.search_patterns)
    if not torch.cuda.is_available():
        raise RuntimeError(
            "kernelpro warmup searches kernels on a CUDA GPU and none is visible here; "
            "run it on the machine (or the same GPU model) the model will train on"
        )
    from ..tuner import default_provider

    provider = default_provider(resolved)
    start = getattr(provider, "prestart", None)
    if start is not None:
        start()
    return provider


# The whole warm-up's seconds by default (`kernelpro warmup`, `warmup()`): a corpus model warmed
# up within 10 minutes on one H100 — 600 s less ~30 s to start the worker pool and build the
# model, and less one whole-step compile that the in-context check may be in when the deadline
# comes (Inductor compiled the Qwen2 and T5 training steps in 61 and 73 s; H100, 2026-12-06,
# docs/gpu_runs/2026-12-06-real-models-h100/).
DEFAULT_DEADLINE_S = 480.0


def warmup(
    model: torch.nn.Module,
    example_inputs: Sequence[Any],
    *,
    train: bool = True,
    budget_s: float | None = None,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    options: dict[str, Any] | None = None,
    provider: KernelProvider | None = None,
    release_workers: bool = True,
    more_inputs: Sequence[Sequence[Any]] = (),
    check_context: bool = True,
    deadline_s: float | None = DEFAULT_DEADLINE_S,
) -> WarmupReport:
    """Search every subgraph of `model` the cache lacks (forward and, with `train`, backward).

    `budget_s` is the search budget per subgraph (at most: a planned warm-up gives each search
    its share of the time left); `loss_fn(output) -> scalar` defines the training step
    (default: sum of the output). With one example shape and a KernelFinder (the default
    provider) the warm-up plans first (planned.py): the step's subgraphs found, each distinct
    key searched once, in descending estimated gain, until the deadline's search share.
    `more_inputs`: example inputs at other shapes (a shorter last batch, other sequence
    lengths). Each shape is compiled on its own with static sizes (`dynamic=False`), so a
    model compiled with `dynamic=False` finds a kernel per shape; then all shapes run in order
    through one compile, as a training loop meets them: torch.compile recompiles with symbolic
    sizes at the first change, and each size's instance of every symbolic subgraph is searched
    (rewrite/dispatch.py). Pass the shapes in the order training meets them (the last batch
    last); these are searched as the compiles meet them.
    `release_workers`: shut the worker pool down at the end (a caller warming several models
    keeps it and calls `tuner.searcher.release_gpu_memory()` itself).
    `check_context`: then time the step with and without the kernels found and record the
    ones that slow it (incontext.py; one shape, one process, CUDA); until judged they are
    held, unused by other compiles. `deadline_s` (None: none): the whole warm-up's seconds;
    the searches stop CHECK_SHARE of them before it, the check at it (what it has not judged
    stays held)."""
    opts = warmup_options(options, budget_s)
    check_pattern_names((resolved := Options.resolve(options=opts)).search_patterns)
    if provider is None:
        provider = search_provider(opts)
    rows: list[WarmupRow] = []

    def note_symbolic(graph_kind: str, subgraphs: Sequence[Subgraph]) -> None:
        for sg in subgraphs:  # dynamic ones: rows of their own, per size (their instances)
            if sg.symbolic and not sg.dynamic:
                rows.append(
                    WarmupRow(graph_kind, sg.pattern, "-", "symbolic", 0.0, recording.shape)
                )

    recording = _Recording(provider, rows)
    recording.prestart()
    backend = make_backend(provider=recording, observer=note_symbolic)
    model = copy.deepcopy(model)
    started, phases, say = time.perf_counter(), Phases(), progress(resolved.progress)
    shapes = [list(example_inputs), *(list(i) for i in more_inputs)]
    step = functools.partial(_step, model, backend, opts, train, loss_fn)
    ranks_agree = getattr(provider, "agrees_across_ranks", False)
    checks = check_context and train and len(shapes) == 1 and not ranks_agree
    deadline = recording.arm(model, started, deadline_s, checks)
    collect = functools.partial(_step_subgraphs, model, opts, train, loss_fn)
    plans = []
    if len(shapes) == 1 and not ranks_agree and recording.finder is not None:
        plans.append(_plan_and_search(step, collect, shapes[0], recording, phases, say, checks))
    else:
        _warm_in_compile_order(step, collect, shapes, recording, phases, ranks_agree)
    with phases.timing("cutlass"):
        _finish_builds(provider, recording.search_until)
    if release_workers and torch.cuda.is_available():
        from ..tuner.searcher import release_gpu_memory

        release_gpu_memory()
    context: list[str] = []
    if check_context and train and torch.cuda.is_available():
        say(f"in-context check of the step ({len(recording.held or ())} kernel(s) found now)")
        with phases.timing("check"):
            context = _check_context(
                model, shapes, opts, loss_fn, ranks_agree, recording.held, deadline
            )
    seconds = time.perf_counter() - started
    say(Phases(phases).line(seconds))
    return WarmupReport(rows, seconds, context, dict(phases), plan_summary(plans))


def _plan_and_search(
    step: Callable[..., None],
    collect: Callable[..., list[Subgraph]],
    inputs: list[Any],
    recording: _Recording,
    phases: Phases,
    say: Callable[[str], None],
    checks: bool,
) -> SearchPlan:
    """One shape: the step's subgraphs found, searched in order of estimated gain
    (planned.py), then the step compiled with what the cache holds, unless the in-context
    check follows (it compiles the step with the kernels itself). The rows: the plan's."""
    found = functools.partial(collect, inputs, None)
    plan, planned_rows = warm_planned(recording, found, phases, say)
    if not (checks and torch.cuda.is_available()):
        say("compiling the step with what the cache holds")
        with phases.timing("compile"):
            step(inputs, dynamic=None)
    recording.rows[:] = planned_rows
    return plan


def _warm_in_compile_order(
    step: Callable[..., None],
    collect: Callable[..., list[Subgraph]],
    shapes: list[list[Any]],
    recording: _Recording,
    phases: Phases,
    ranks_agree: bool,
) -> None:
    """Each shape compiled on its own (static sizes), searching as the compile meets its
    subgraphs (or, under distributed search, the ranks agreeing on the whole step first);
    several shapes then in order through one compile. `phases`: the time in lookups and
    searches is the search's, the rest the compiles'."""
    t0, found_before = time.perf_counter(), recording.find_s
    for inputs in shapes:
        recording.shape = _shape_label(inputs) if len(shapes) > 1 else ""
        dynamic = False if len(shapes) > 1 else None
        if len(shapes) > 1:
            torch._dynamo.reset()  # each shape its own static graph, not a symbolic one
        if ranks_agree:
            with phases.timing("collect"):
                found = collect(inputs, dynamic)
            recording.prepare(found)
        step(inputs, dynamic=dynamic)
    if len(shapes) > 1:
        # Then the shapes in order, as a training loop meets them: torch.compile recompiles
        # with symbolic sizes, and each size's instance is searched (rewrite/dispatch.py).
        torch._dynamo.reset()
        for inputs in shapes:
            recording.shape = _shape_label(inputs)
            step(inputs, dynamic=None)
    searched = recording.find_s - found_before
    phases["search"] = phases.get("search", 0.0) + searched
    elapsed = time.perf_counter() - t0 - phases.get("collect", 0.0) - searched
    phases["compile"] = phases.get("compile", 0.0) + elapsed


def _check_context(
    model: torch.nn.Module,
    shapes: list[list[Any]],
    opts: dict[str, Any],
    loss_fn: Callable[[Any], torch.Tensor] | None,
    ranks_agree: bool,
    held: set[str] | None,
    deadline: float | None,
) -> list[str]:
    """The in-context check (incontext.py) where it can run, else why not."""
    if not torch.cuda.is_available():
        return []
    if len(shapes) > 1 or ranks_agree:
        return ["in context: not checked (several shapes, or several ranks)"]
    from ..tuner import default_provider
    from .incontext import check_in_context

    finder = default_provider(Options.resolve(options={**opts, "search": "cache-only"}))
    if getattr(finder, "cache", None) is None:
        return ["in context: not checked (no cache)"]
    return check_in_context(
        model, shapes[0], opts, loss_fn or _default_loss, finder, held or (), deadline
    )


# How long the end of a warm-up waits for CUTLASS libraries still building (offline work: the
# next run's searches and cache hits find them built instead of building them again).
BUILDS_WAIT_S = 600.0


def _finish_builds(provider: Any, until: float | None = None) -> None:
    """Wait for the CUTLASS libraries still building: BUILDS_WAIT_S at most, and with a
    deadline no later than its search share (`until`, time.perf_counter()): the in-context
    check goes first (the builds paused while it times the step), then the builds go on."""
    finder = getattr(provider, "inner", provider)  # the distributed finder wraps one
    builds = getattr(getattr(finder, "searcher", None), "cutlass", None)
    if builds is None or not builds.running():
        return
    wait_s = (
        BUILDS_WAIT_S
        if until is None
        else max(0.0, min(BUILDS_WAIT_S, until - time.perf_counter()))
    )
    log.info(
        "waiting up to %.0f s for %d CUTLASS GEMM libraries still building",
        wait_s,
        builds.running(),
    )
    if not builds.wait(wait_s) and until is not None:
        log.warning(
            "%d CUTLASS GEMM libraries still building at the deadline's "
            "search share; they are paused while the in-context check times the step",
            builds.running(),
        )


def _step(
    model: torch.nn.Module,
    backend: Callable[..., Any],
    opts: dict[str, Any],
    train: bool,
    loss_fn: Callable[[Any], torch.Tensor] | None,
    inputs: Sequence[Any],
    dynamic: bool | None,
) -> None:
    """One compiled step of `model` at `inputs` (forward and backward with `train`)."""
    compiled = torch.compile(model, backend=backend, options=opts, dynamic=dynamic)
    if train:
        out = compiled(*inputs)
        loss = loss_fn(out) if loss_fn else _default_loss(out)
        loss.backward()
        model.zero_grad(set_to_none=True)
    else:
        with torch.no_grad():
            compiled(*inputs)


def _step_subgraphs(
    model: torch.nn.Module,
    opts: dict[str, Any],
    train: bool,
    loss_fn: Callable[[Any], torch.Tensor] | None,
    inputs: Sequence[Any],
    dynamic: bool | None,
) -> list[Subgraph]:
    """Every subgraph of one step, forward and backward, found before anything is searched:
    the step compiled with the eager fallback (the same graphs and keys as Inductor's, nothing
    compiled) and a provider that finds nothing. Ranks that agree on the kernels (distributed
    search) then claim the whole step's misses in one round instead of one round per graph,
    so a rank whose forward searches end early takes backward ones meanwhile.

    Where Inductor lays a forward channels-last (a CNN's), the backward receives the saved
    activations at the strides its compiled forward returns, and its subgraphs are keyed at
    them (fx_passes/input_strides.py); eager returns them as traced. The step is then
    collected again through the fallback the user compiles with, so that the backward's keys
    are the ones its compiles will look up."""
    t0 = time.perf_counter()
    found, laid = _collected(model, opts, "eager", train, loss_fn, inputs, dynamic)
    fallback = Options.resolve(options=opts).fallback
    if laid and fallback != "eager":
        log.info(
            "Inductor lays the forward channels-last: the step's subgraphs are collected "
            "again through it, so that the backward's keys are at the strides it returns"
        )
        found, _ = _collected(model, opts, fallback, train, loss_fn, inputs, dynamic)
    log.info(
        "%d subgraph(s) of the step found in %.1f s",
        len(found),
        time.perf_counter() - t0,
    )
    return found


def _collected(
    model: torch.nn.Module,
    opts: dict[str, Any],
    fallback: str,
    train: bool,
    loss_fn: Callable[[Any], torch.Tensor] | None,
    inputs: Sequence[Any],
    dynamic: bool | None,
) -> tuple[list[Subgraph], bool]:
    """The step's subgraphs compiled under `fallback`, and whether Inductor would lay one of
    its forward graphs channels-last (runtime/fallback.layout_decision)."""
    found: list[Subgraph] = []
    laid: list[bool] = []

    def observe(kind: str, subgraphs: Sequence[Subgraph]) -> None:
        found.extend(subgraphs)  # keyed when made (fx_passes/subgraph.Subgraph.key)
        nodes = next((sg.nodes for sg in subgraphs if sg.nodes), None)
        if kind == "forward" and train and nodes:
            laid.append(layout_decision(nodes[0].graph, inference=False))

    backend = make_backend(provider=_NoKernels(), observer=observe)
    _step(model, backend, {**opts, "fallback": fallback}, train, loss_fn, inputs, dynamic)
    torch._dynamo.reset()
    return found, any(laid)


class _NoKernels:
    """The provider of `_step_subgraphs`: every subgraph keeps the fallback."""

    def find(self, subgraph: Subgraph) -> Kernel | None:
        return None


def _shape_label(inputs: Sequence[Any]) -> str:
    return (
        ",".join("x".join(map(str, i.shape)) for i in inputs if isinstance(i, torch.Tensor)) or "-"
    )


def _default_loss(out: Any) -> torch.Tensor:
    """The sum of the output; a model that computes its own loss (Hugging Face's `labels=`:
    `out.loss` or `out["loss"]`, beside its logits) trains on that loss, as its users do."""
    if isinstance(out, torch.Tensor):
        return out.float().sum()
    if isinstance(out, (list, tuple)):
        return sum((_default_loss(o) for o in out if isinstance(o, torch.Tensor)), torch.zeros(()))
    loss = out.get("loss") if isinstance(out, dict) else getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    raise TypeError(
        "pass loss_fn: the model's output is not a tensor, a tuple of tensors or a loss "
        "returned beside other outputs (`out.loss`)"
    )
