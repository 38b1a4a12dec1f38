"""A candidate timed with the copies its graph makes around it.

In a channels-last graph Inductor lays the activations NHWC, but a kernel kernelpro serves is
a node with the aten graph's (NCHW) strides: Inductor copies each activation it gave another
layout to those strides before the kernel (`constrain_to_fx_strides` for a user Triton kernel),
and an output is converted to NHWC where a convolution reads it (`require_channels_last`), or
on its way there when a convolution made it (fallback.py says which). Timed alone on NCHW
inputs, a kernel skipped those copies, while the Inductor baseline it had to beat was timed
with the graph's layout (fallback.py). Inductor decides the layout per graph: a training step's
forward (its convolutions, BatchNorms and the pointwise work between them) can be channels-last
while its backward, which has no aten.convolution, is not; the backward's saved activations
then arrive NHWC, and its values are keyed at those strides (fx_passes/input_strides.py).

Owns: `as_timed` (what the worker times for a job, on inputs of which metas), `in_graph_call`
(a kernel wrapped in the copies), `in_graph_inputs` (the metas its inputs are drawn at) and
`copy_bytes` (what the copies move, for the warm-up's plan).
Must not: compile, prove or time anything (worker.py times what this returns; the kernel is
proved on its own metas).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .candidate import BaselineCandidate
from .fallback import FallbackSettings, TensorMeta
from .job import Job


def as_timed(job: Job, kernel: Callable[..., Any]) -> tuple[Callable[..., Any], list[TensorMeta]]:
    """What the worker times for `job`, on inputs of which metas: a candidate (eager's cuDNN
    call included, which the graph serves as kernelpro::launch) with the copies its graph makes
    around it; the Inductor baseline as itself, its job already laid as in the graph."""
    if isinstance(job.candidate, BaselineCandidate) and job.candidate.name == "inductor":
        return kernel, list(job.input_meta)
    timed = in_graph_call(kernel, job.input_meta, job.output_meta, job.fallback)
    return timed, in_graph_inputs(job.input_meta, job.fallback)


def in_graph_inputs(own: Sequence[TensorMeta], fallback: FallbackSettings) -> list[TensorMeta]:
    """The input metas a candidate is timed on: as the graph lays them (its own when None)."""
    return list(fallback.graph_input_meta or own)


def in_graph_call(
    kernel: Callable[..., Any],
    own_inputs: Sequence[TensorMeta],
    own_outputs: Sequence[TensorMeta],
    fallback: FallbackSettings,
) -> Callable[..., Any]:
    """`kernel` as its graph runs it: each input it receives at other strides than its own is
    copied to its own first, and each output the graph needs at other strides is copied to
    them after. `kernel` itself when the graph makes no copy."""
    laid_in, laid_out = _laid(own_inputs, own_outputs, fallback)
    before = [i for i, (a, b) in enumerate(zip(laid_in, own_inputs, strict=True)) if a != b]
    after = [i for i, (a, b) in enumerate(zip(laid_out, own_outputs, strict=True)) if a != b]
    if not before and not after:
        return kernel
    wanted_in = [own_inputs[i] for i in before]
    wanted_out = [laid_out[i] for i in after]

    def call(*inputs: torch.Tensor) -> Any:
        args = list(inputs)
        for i, meta in zip(before, wanted_in, strict=True):
            args[i] = _copied(args[i], meta)
        outs = kernel(*args)
        if not after:
            return outs
        single = isinstance(outs, torch.Tensor)
        listed = [outs] if single else list(outs)
        for i, meta in zip(after, wanted_out, strict=True):
            listed[i] = _copied(listed[i], meta)
        return listed[0] if single else type(outs)(listed)

    return call


def _laid(
    own_inputs: Sequence[TensorMeta], own_outputs: Sequence[TensorMeta], fallback: FallbackSettings
) -> tuple[Sequence[TensorMeta], Sequence[TensorMeta]]:
    """The inputs' and outputs' metas as the graph has them around a kernel."""
    return (
        fallback.graph_input_meta or tuple(own_inputs),
        fallback.graph_output_meta or tuple(own_outputs),
    )


def _copied(t: torch.Tensor, meta: TensorMeta) -> torch.Tensor:
    shape, stride, _ = meta
    return torch.empty_strided(shape, stride, dtype=t.dtype, device=t.device).copy_(t)


def copy_bytes(
    own_inputs: Sequence[TensorMeta], own_outputs: Sequence[TensorMeta], fallback: FallbackSettings
) -> int:
    """The bytes the graph's copies around a kernel move: each copied tensor read and written."""
    laid_in, laid_out = _laid(own_inputs, own_outputs, fallback)
    pairs = [*zip(laid_in, own_inputs, strict=True), *zip(laid_out, own_outputs, strict=True)]
    return sum(2 * math.prod(a[0]) * getattr(torch, a[2]).itemsize for a, b in pairs if a != b)
