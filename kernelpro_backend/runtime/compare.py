"""Checking one run of a candidate against the reference: the pure, tensor-level checks.

Owns: tolerances by dtype, the element-wise comparison with a float64 reference, poisoning the
allocator with NaN, and the checks that outputs have the right form, alias no input the
reference does not, leave inputs unmodified, and repeat bit for bit.
Must not: load or time candidates, or pick inputs (validate.py does).

Each check returns None when it passes or a `Rejection` naming what failed and where.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from .result import EvalStatus

TensorMeta = tuple[tuple[int, ...], tuple[int, ...], str]

# (rtol, atol) per output dtype against a float64 reference. float32 follows the 1e-5 relative /
# 1e-4 absolute house rule; half types allow a few units of their last place (bf16 eps 7.8e-3).
TOLERANCE: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-9, 1e-9),
    torch.float32: (1e-5, 1e-4),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}
# A candidate may also be as inaccurate as PyTorch eager in the output dtype (under the same
# precision policy, so TF32 is looser by exactly as much as PyTorch's own TF32 is), times this.
EAGER_ERROR_FACTOR = 2.0


@dataclasses.dataclass(frozen=True)
class Rejection:
    status: EvalStatus
    message: str
    details: dict[str, Any] = dataclasses.field(default_factory=dict)


def poison_allocator(metas: Sequence[TensorMeta], device: torch.device) -> None:
    """Hand NaN-filled blocks of each output's size back to the allocator, so that a kernel's
    `torch.empty` output holds NaN (not a stale correct answer) wherever the kernel writes
    nothing. Integer blocks get all bits set."""
    blocks = []
    for shape, _, dtype_name in metas:
        numel = 1
        for s in shape:
            numel *= s
        for _ in range(2):  # two blocks per size: the allocator may pick either
            block = torch.empty(max(numel, 1), dtype=getattr(torch, dtype_name), device=device)
            if block.dtype.is_floating_point:
                block.fill_(float("nan"))
            else:
                block.view(torch.uint8).fill_(255)
            blocks.append(block)
    del blocks


def check_form(outs: object, metas: Sequence[TensorMeta], device: torch.device) -> Rejection | None:
    if not isinstance(outs, (list, tuple)) or not all(isinstance(o, torch.Tensor) for o in outs):
        return Rejection(
            EvalStatus.WRONG,
            f"the kernel returned {type(outs).__name__}; it must return a list of tensors",
        )
    if len(outs) != len(metas):
        return Rejection(
            EvalStatus.WRONG, f"the kernel returned {len(outs)} outputs, the reference {len(metas)}"
        )
    for i, (out, (shape, _, dtype)) in enumerate(zip(outs, metas, strict=True)):
        got = (tuple(out.shape), str(out.dtype).removeprefix("torch."), out.device.type)
        want = (tuple(shape), dtype, device.type)
        if got != want:
            return Rejection(
                EvalStatus.WRONG,
                f"output {i} is (shape, dtype, device) {got}, the reference {want}",
                {"output": i},
            )
    return None


def _byte_range(t: torch.Tensor) -> tuple[int, int] | None:
    if t.numel() == 0:
        return None
    span = 1 + sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride(), strict=True))
    return t.data_ptr(), t.data_ptr() + span * t.element_size()


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    ra, rb = _byte_range(a), _byte_range(b)
    return ra is not None and rb is not None and ra[0] < rb[1] and rb[0] < ra[1]


def aliased_pairs(outs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor]) -> set[str]:
    """Which outputs share memory with an input ("out0~in1") or another output ("out0~out2")."""
    pairs = {
        f"out{i}~in{j}" for i, o in enumerate(outs) for j, x in enumerate(inputs) if overlaps(o, x)
    }
    pairs |= {
        f"out{i}~out{j}"
        for i, o in enumerate(outs)
        for j in range(i + 1, len(outs))
        if overlaps(o, outs[j])
    }
    return pairs


def check_aliasing(
    outs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor], allowed: set[str]
) -> Rejection | None:
    extra = sorted(aliased_pairs(outs, inputs) - allowed)
    if extra:
        return Rejection(
            EvalStatus.SUSPICIOUS,
            f"output storage aliases memory the reference does not share ({', '.join(extra)}): "
            "a kernel must write fresh outputs, not return or overwrite an input",
            {"aliased": extra},
        )
    return None


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(
        a.contiguous().view(-1).view(torch.uint8), b.contiguous().view(-1).view(torch.uint8)
    )


def check_inputs_unmodified(
    inputs: Sequence[torch.Tensor], saved: Sequence[torch.Tensor]
) -> Rejection | None:
    for j, (x, before) in enumerate(zip(inputs, saved, strict=True)):
        if not bitwise_equal(x, before):
            return Rejection(
                EvalStatus.SUSPICIOUS,
                f"the kernel modified input {j}: kernels must leave their inputs unchanged",
                {"input": j},
            )
    return None


def check_deterministic(
    first: Sequence[torch.Tensor], second: Sequence[torch.Tensor]
) -> Rejection | None:
    for i, (a, b) in enumerate(zip(first, second, strict=True)):
        if not bitwise_equal(a, b):
            differ = int((a != b).sum()) if a.dtype != torch.bool else -1
            return Rejection(
                EvalStatus.WRONG,
                f"non-deterministic: output {i} differs between two runs on the same inputs "
                f"({differ} elements differ); results must be bit-identical run to run",
                {"output": i, "differing_elements": differ},
            )
    return None


# Outputs over this many elements are compared in slices: the comparison makes several float64
# temporaries of its input's size (40+ GB for a 1G-element output, where a slice needs ~2 GB).
COMPARE_CHUNK = 1 << 25


def max_abs_error(got: torch.Tensor, ref64: torch.Tensor) -> float:
    """The largest |got - ref64| where both are finite, computed slice by slice."""
    r, g = ref64.reshape(-1), got.reshape(-1)
    worst = 0.0
    for start in range(0, r.numel(), COMPARE_CHUNK):
        rs, gs = (
            r[start : start + COMPARE_CHUNK].double(),
            g[start : start + COMPARE_CHUNK].double(),
        )
        err = (gs - rs).abs()[torch.isfinite(rs) & torch.isfinite(gs)]
        if err.numel():
            worst = max(worst, float(err.max()))
    return worst


def _eager_slack(got: torch.Tensor, ref64: torch.Tensor, eager: torch.Tensor | None) -> float:
    """EAGER_ERROR_FACTOR x eager's own largest error where both are finite, sliced."""
    if eager is None or not got.dtype.is_floating_point:
        return 0.0
    return EAGER_ERROR_FACTOR * max_abs_error(eager, ref64)


def compare(
    i: int, got: torch.Tensor, ref64: torch.Tensor, eager: torch.Tensor | None
) -> tuple[Rejection | None, float]:
    """Compare output `i` with the float64 reference. Returns (rejection, worst error/allowed).
    Large outputs are compared slice by slice against one eager slack for the whole output."""
    if got.numel() <= COMPARE_CHUNK or not got.dtype.is_floating_point:
        return _compare(i, got, ref64, eager)
    slack = _eager_slack(got, ref64, eager)
    g, r = got.reshape(-1), ref64.reshape(-1)
    worst = 0.0
    for start in range(0, g.numel(), COMPARE_CHUNK):
        stop = start + COMPARE_CHUNK
        rejection, ratio = _compare(i, g[start:stop], r[start:stop], None, slack)
        if rejection is not None:
            flat = start + int(rejection.details["index"][0])
            where = tuple(int(v) for v in torch.unravel_index(torch.tensor(flat), got.shape))
            message = rejection.message.replace(
                f"at {rejection.details['index']}", f"at {where}", 1
            )
            details = {**rejection.details, "index": where, "slice_start": start}
            return Rejection(rejection.status, message + " (first failing slice)", details), ratio
        worst = max(worst, ratio)
    return None, worst


def _compare(
    i: int,
    got: torch.Tensor,
    ref64: torch.Tensor,
    eager: torch.Tensor | None,
    slack: float | None = None,
) -> tuple[Rejection | None, float]:
    if not got.dtype.is_floating_point:
        expected = eager if eager is not None else ref64
        bad = got != expected.to(got.dtype)
        if bad.any():
            where = tuple(int(v) for v in bad.nonzero()[0])
            return Rejection(
                EvalStatus.WRONG,
                f"output {i} differs from the reference at {where}: "
                f"{got[where].item()} vs {expected[where].item()} ({int(bad.sum())} elements)",
                {"output": i, "index": where, "count": int(bad.sum())},
            ), float("inf")
        return None, 0.0
    rtol, atol = TOLERANCE.get(got.dtype, TOLERANCE[torch.float32])
    g, r = got.double(), ref64.double()
    finite = torch.isfinite(r)
    if slack is None:
        slack = _eager_slack(got, ref64, eager)
    allowed = atol + rtol * r.abs() + slack
    err = (g - r).abs()
    ratio = torch.where(finite, err / allowed, torch.zeros_like(err))
    ratio = torch.where(finite & torch.isnan(g), torch.full_like(err, float("inf")), ratio)
    nonfinite_mismatch = ~finite & ~((g == r) | (torch.isnan(g) & torch.isnan(r)))
    ratio = torch.where(nonfinite_mismatch, torch.full_like(err, float("inf")), ratio)
    worst = float(ratio.max()) if ratio.numel() else 0.0
    if worst <= 1.0:
        return None, worst
    bad = ratio > 1.0
    where = tuple(int(v) for v in torch.nonzero(ratio == ratio.max())[0])
    got_v, ref_v = float(g[where]), float(r[where])
    max_err = (
        float(err[finite & torch.isfinite(g)].max())
        if (finite & torch.isfinite(g)).any()
        else float("nan")
    )
    details = {
        "output": i,
        "index": where,
        "got": got_v,
        "expected": ref_v,
        "max_abs_error": max_err,
        "allowed_at_index": float(allowed[where]) if allowed.dim() else float(allowed),
        "bad_elements": int(bad.sum()),
        "elements": int(bad.numel()),
        "rtol": rtol,
        "atol": atol,
        "eager_slack": slack,
    }
    hint = ""
    if torch.isnan(g[where]) and torch.isfinite(r[where]):
        hint = (
            " (NaN where the reference is finite: an element the kernel never wrote, or "
            "uninitialised memory; outputs are poisoned with NaN before each run)"
        )
    elif got.dtype == torch.float32 and bool((err[finite] <= 2e-2 * r.abs()[finite] + 2e-2).all()):
        hint = (
            " (errors at the level of bfloat16/float16 rounding: the kernel computes in lower "
            "precision than the float32 policy allows)"
        )
        details["lower_precision_suspected"] = True
    message = (
        f"output {i} differs from the reference at {where}: got {got_v:.6g}, expected "
        f"{ref_v:.6g}; {details['bad_elements']}/{details['elements']} elements outside "
        f"rtol={rtol:g} atol={atol:g}{hint}"
    )
    return Rejection(EvalStatus.WRONG, message, details), worst
