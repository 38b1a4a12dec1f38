"""Proving a candidate computes the reference's function, on several fresh input sets.

Owns: choosing the trial inputs (seeded, never zeros, negative values always, large values
where the op stays finite in its own dtype; trial 1 rewrites trial 0's buffers in place so a
kernel that caches by pointer or skips repeated inputs returns stale results), computing the
reference (float64 where the module runs on upcast inputs, and in the native dtype under the
precision policy), and running each check of compare.py in order.
Must not: time candidates or load them.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..fx_passes.subgraph import IntRange, random_inputs
from .compare import (
    Rejection,
    aliased_pairs,
    check_aliasing,
    check_deterministic,
    check_form,
    check_inputs_unmodified,
    compare,
    max_abs_error,
    poison_allocator,
)
from .job import Job
from .result import EvalStatus

LARGE_SCALE = 16.0  # trial 1 multiplies float inputs by this, where the op stays finite


@dataclasses.dataclass
class Reference:
    exact: list[torch.Tensor]  # float64 where possible
    eager: list[torch.Tensor] | None  # native dtype under the policy (None if exact is native)
    aliases: set[str]


def _as_list(outs: object) -> list[torch.Tensor]:
    return list(outs) if isinstance(outs, (list, tuple)) else [outs]  # type: ignore[list-item]


def round_to_tf32(x: torch.Tensor) -> torch.Tensor:
    """The nearest tf32 value of each float32 element (10 mantissa bits, ties away from zero),
    as `cvt.rna.tf32.f32` and cuBLAS's tf32 mode round. NaN and inf are kept."""
    bits = x.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    rounded = ((bits + 0x1000) & 0xFFFFE000).to(torch.uint32).view(torch.int32)
    out = rounded.view(torch.float32).view(x.shape)
    return torch.where(torch.isfinite(x), out, x)


class _Tf32OnCpu(TorchDispatchMode):
    """PyTorch's CPU matmuls ignore the tf32 policy (they stay IEEE float32). On the CPU (Triton's
    interpreter) a tf32 reference therefore rounds the float32 operands of every matrix product
    to tf32 first, as the GPU's tensor cores do under that policy; accumulation stays float32.
    A convolution backward's bias gradient is a plain float32 sum of the output gradient (no
    product): it is computed from the unrounded operands."""

    _OPS = {
        "aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::convolution",
        "aten::convolution_backward",  # its three operands: grad_output, input, weight
    }  # fmt: skip

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if func._schema.name in self._OPS:
            operands = {"aten::addmm": (1, 2), "aten::baddbmm": (1, 2)}.get(
                func._schema.name, (0, 1, 2) if "backward" in func._schema.name else (0, 1)
            )
            exact = args
            args = tuple(
                round_to_tf32(a)
                if i in operands and isinstance(a, torch.Tensor) and a.dtype == torch.float32
                else a
                for i, a in enumerate(args)
            )
            if "backward" in func._schema.name and len(exact) > 10 and exact[10][2]:
                dx, dw, _ = func(*args, **kwargs)
                return dx, dw, func(*exact[:10], [False, False, True], **kwargs)[2]
        return func(*args, **kwargs)


def compute_reference(
    reference: Callable[..., Any], inputs: Sequence[torch.Tensor], float64: bool = True
) -> Reference:
    """The reference's outputs on `inputs`: float64 where every op has a float64 kernel and
    `float64` is asked for, else the native run alone."""
    emulate_tf32 = torch.get_float32_matmul_precision() != "highest" and all(
        x.device.type == "cpu" for x in inputs
    )
    with torch.no_grad(), _Tf32OnCpu() if emulate_tf32 else contextlib.nullcontext():
        eager = _as_list(reference(*inputs))
        aliases = aliased_pairs(eager, inputs)
        if not float64:
            return Reference(eager, None, aliases)
        upcast = [x.double() if x.dtype.is_floating_point else x for x in inputs]
        try:
            outs = _as_list(reference(*upcast))
        except Exception:  # an op without a float64 kernel here: the native run is the reference
            return Reference(eager, None, aliases)
        del upcast  # at real sizes the float64 inputs are gigabytes: free them before copying
        # Views (of an upcast input) are copied; fresh outputs are kept as they are.
        exact = [o.clone() if o._is_view() else o for o in outs]
    return Reference(exact, eager, aliases)


def _finite_where_exact_is(ref: Reference) -> bool:
    if ref.eager is None:
        return True
    for e, x in zip(ref.eager, ref.exact, strict=True):
        if e.dtype.is_floating_point and bool((torch.isfinite(x) & ~torch.isfinite(e)).any()):
            return False
    return True


def trial_inputs(
    job: Job,
    reference: Callable[..., Any],
    trial: int,
    device: torch.device,
    previous: list[torch.Tensor] | None,
) -> tuple[list[torch.Tensor], Reference, dict[str, Any]]:
    """Inputs for one trial and the reference outputs on them."""
    ranges = {i: IntRange(lo, hi) for i, lo, hi in job.int_ranges}
    seed = job.seed * 1000 + trial
    fresh = random_inputs(list(job.input_meta), ranges, seed, device)
    info: dict[str, Any] = {"trial": trial, "seed": seed, "scale": 1.0}
    ref: Reference | None = None
    if trial == 1:
        # Scaled in place (no second copy of gigabytes of inputs); drawn again if the op
        # does not stay finite at that scale.
        for x in fresh:  # through the base: an expanded input's view cannot be written
            if x.dtype.is_floating_point:
                (x._base if x._base is not None else x).mul_(LARGE_SCALE)
        ref = compute_reference(reference, fresh, job.exact_reference)
        if _finite_where_exact_is(ref):
            info["scale"] = LARGE_SCALE
        else:
            ref = None
            fresh = random_inputs(list(job.input_meta), ranges, seed, device)
    if trial == 1 and previous is not None:
        # Same addresses, new values: a result cached by pointer is now stale.
        for old, new in zip(previous, fresh, strict=True):
            old.untyped_storage().copy_(new.untyped_storage())
        fresh, info["in_place"] = previous, True
    # The reference of the scaled values is computed once (the same values, now in place).
    if ref is None:
        ref = compute_reference(reference, fresh, job.exact_reference)
    return fresh, ref, info


def run_once(
    kernel: Callable[..., Any],
    inputs: Sequence[torch.Tensor],
    job: Job,
    device: torch.device,
    snapshot: bool = True,
) -> tuple[object, list[torch.Tensor] | None]:
    """One poisoned run. Returns (raw outputs, snapshot). The snapshot is taken on the current
    stream right after the call, without synchronising: work a kernel left on a side stream
    unsynchronised is not in it. `snapshot=False`: none (the outputs, synchronised, are all)."""
    poison_allocator(job.output_meta, device)
    with torch.no_grad():
        outs = kernel(*inputs)
        if isinstance(outs, torch.Tensor):
            outs = [outs]
        tensors = isinstance(outs, (list, tuple)) and all(isinstance(o, torch.Tensor) for o in outs)
        snap = [o.clone() for o in outs] if snapshot and tensors else None
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return outs, snap


def validate(
    kernel: Callable[..., Any],
    reference: Callable[..., Any],
    job: Job,
    device: torch.device,
    check_determinism: bool = True,
) -> tuple[Rejection | None, dict[str, Any]]:
    """Run every check on `job.trials` input sets. Returns (rejection or None, details)."""
    details: dict[str, Any] = {"trials": []}
    previous: list[torch.Tensor] | None = None
    worst = 0.0
    errors: dict[str, float] = {}
    for trial in range(job.trials):
        inputs, ref, info = trial_inputs(job, reference, trial, device, previous)
        details["trials"].append(info)
        details["reference"] = "native" if ref.eager is None else "float64"
        saved = [x.clone() for x in inputs]
        outs, snap = run_once(kernel, inputs, job, device)
        rejection = check_form(outs, job.output_meta, device)
        if rejection is None:
            assert isinstance(outs, (list, tuple)) and snap is not None
            rejection = check_aliasing(outs, inputs, ref.aliases) or check_inputs_unmodified(
                inputs, saved
            )
        if rejection is None:
            assert snap is not None
            for i, got in enumerate(snap):
                eager = ref.eager[i] if ref.eager is not None else None
                rejection, ratio = compare(i, got, ref.exact[i], eager)
                worst = max(worst, ratio)
                if rejection is not None:
                    break
                if job.precision == "tf32x3" and got.dtype.is_floating_point:
                    _record_errors(errors, got, ref.exact[i], eager)
        if rejection is None and trial == 0 and check_determinism:
            assert snap is not None
            # Keep the first run's outputs alive so the second cannot be handed their memory.
            # The second run's synchronised outputs are compared as they are: a snapshot of
            # them would be one more copy of every output (gigabytes at real sizes).
            outs2, _ = run_once(kernel, inputs, job, device, snapshot=False)
            rejection = check_form(outs2, job.output_meta, device) or check_deterministic(
                snap,
                list(outs2),  # type: ignore[call-overload]
            )
            del outs2
        if rejection is not None:
            rejection.details.update(info, reference=details["reference"])
            return _with_trial(rejection, info), details
        previous = inputs if trial == 0 else None  # only trial 1 rewrites trial 0's inputs
        del outs, snap, inputs, ref, saved
    details["worst_error_ratio"] = worst  # largest error / allowed over all outputs and trials
    details.update(errors)
    return None, details


def _record_errors(
    errors: dict[str, float], got: torch.Tensor, exact: torch.Tensor, eager: torch.Tensor | None
) -> None:
    """Under tf32x3: the candidate's largest error against float64 and IEEE float32 eager's on
    the same inputs (the accuracy the policy promises), the worst over outputs and trials."""
    errors["max_abs_error"] = max(errors.get("max_abs_error", 0.0), max_abs_error(got, exact))
    if eager is not None:
        ieee = max_abs_error(eager, exact)
        errors["ieee_max_abs_error"] = max(errors.get("ieee_max_abs_error", 0.0), ieee)


def _with_trial(rejection: Rejection, info: dict[str, Any]) -> Rejection:
    where = f"trial {info['trial']} (seed {info['seed']}, inputs x{info['scale']:g})"
    if info.get("in_place") and rejection.status is EvalStatus.WRONG:
        where += (
            "; this trial rewrote the previous inputs in place, at the same addresses: "
            "a result cached by pointer or reused for 'repeated' inputs is stale here"
        )
    return dataclasses.replace(rejection, message=f"{rejection.message} [{where}]")
