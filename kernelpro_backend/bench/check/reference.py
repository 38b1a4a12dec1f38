"""The reference a bench mode's outputs are checked against, beside eager's: the same step in
float64, or, for a mixed-precision step whose float64 run does not fit the device, in float32
without its autocast.

Owns: running the uncompiled step for a reference (outputs, loss, gradients) and the fallback
from float64 to float32 when memory runs out.
Must not: compile, time or judge anything (compare.py judges, the runner times).
"""

from __future__ import annotations

import gc
import logging
from typing import Any

import torch

from ..workload import Workload
from .compare import named_tensors

log = logging.getLogger("kernelpro.bench")


def grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {
        f"grad.{name}": p.grad.detach().clone()
        for name, p in model.named_parameters()
        if p.grad is not None
    }


def _run_eagerly(workload: Workload, model: torch.nn.Module, inputs: tuple[Any, ...]) -> dict:
    """Outputs (and grads) of one uncompiled call: used for the float64 reference."""
    if workload.loss_fn is None:
        with torch.no_grad():
            return named_tensors("out", model(*inputs))
    out = model(*inputs)
    loss = workload.loss_fn(out)
    loss.backward()
    return {**named_tensors("out", out), "loss": loss.detach(), **grads(model)}


def fp64_reference(workload: Workload) -> dict[str, torch.Tensor]:
    model = workload.fresh_model().double()
    inputs = tuple(
        v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
        for v in workload.inputs
    )
    return _run_eagerly(workload, model, inputs)


def fp32_reference(workload: Workload) -> dict[str, torch.Tensor] | None:
    """The step without its autocast (a corpus step's `autocast` attribute; its weights are
    float32 already), or None for a step that has none: a reference far finer than a bf16
    step's, where the float64 one does not fit."""
    model = workload.fresh_model()
    if getattr(model, "autocast", None) is None:
        return None
    setattr(model, "autocast", None)  # noqa: B010  (an attribute of the corpus step, not of Module)
    return _run_eagerly(workload, model, workload.inputs)


def autocast_step(workload: Workload) -> bool:
    return getattr(workload.model, "autocast", None) is not None


def fp64_or_none(workload: Workload) -> tuple[dict[str, torch.Tensor] | None, str]:
    """The float64 reference, or (None, why) when it does not fit the device: a whole
    library model's step in float64 (SDPA's math path materialising every attention matrix)
    can need 100+ GiB. A step under autocast is then checked against its float32 run (the
    same rule: no less accurate than eager against it); others against eager alone."""
    why = ""
    try:
        return fp64_reference(workload), ""
    except torch.OutOfMemoryError as e:
        why = str(e)[:200]
    # Released here, not in the handler: the exception's frames hold the partial run's tensors.
    log.warning("%s: the float64 reference does not fit (%s)", workload.name, why)
    release(workload.device)
    fp32: dict[str, torch.Tensor] | None = None
    try:
        fp32 = fp32_reference(workload)
    except torch.OutOfMemoryError as e:
        log.warning(
            "%s: the float32 reference does not fit either (%s)", workload.name, str(e)[:200]
        )
    if fp32 is None:
        release(workload.device)
    if fp32 is not None:
        return fp32, " (reference: the step in float32 without autocast; float64 did not fit)"
    return None, " (no float64 reference: out of memory)"


def release(device: torch.device) -> None:
    torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
