"""Checking a mode's outputs (and gradients) against eager's, with tolerances from the dtype.

Owns: the per-dtype tolerances, flattening outputs into named tensors, and the comparison
that says which tensor of a mode differs from eager and by how much.
Must not: run models or loosen a tolerance because of what a result looks like.

A tensor that misses the elementwise tolerance still passes when it is no less accurate than
eager: its root-mean-square error against a float64 run of the same model is at most twice
eager's (the rule of `torch._dynamo.utils.same(fp64_ref=...)`, which PyTorch's benchmark
harness uses) and its largest error at most 4x eager's largest (so one bad element that the
mean hides still fails). A fused kernel that rounds bf16 less often than eager, or a conv that
cuDNN runs with another TF32 algorithm (PyTorch's default allows TF32 convs), is not wrong.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping

import torch
import torch.utils._pytree as pytree

from ...runtime.compare import TOLERANCE

# (rtol, atol) by dtype: the same table the evaluator proves kernels with.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = TOLERANCE
FP64_RMSE_MULTIPLIER = 2.0
FP64_MAX_MULTIPLIER = 4.0


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    if dtype in TOLERANCES:
        return TOLERANCES[dtype]
    if dtype.is_floating_point:
        raise ValueError(f"no tolerance for {dtype}: add it to runtime.compare.TOLERANCE")
    return (0.0, 0.0)  # integers and bools must match exactly


def named_tensors(prefix: str, value: object) -> dict[str, torch.Tensor]:
    """Flatten an output (tensor, tuple, dict, ...) into {"out[0]": tensor, ...}."""
    leaves = [leaf for leaf in pytree.tree_leaves(value) if isinstance(leaf, torch.Tensor)]
    if len(leaves) == 1:
        return {prefix: leaves[0].detach()}
    return {f"{prefix}[{i}]": leaf.detach() for i, leaf in enumerate(leaves)}


@dataclasses.dataclass(frozen=True)
class Mismatch:
    tensor: str
    max_abs_err: float
    max_rel_err: float
    reason: str

    def describe(self) -> str:
        return (
            f"{self.tensor}: {self.reason} (max abs err {self.max_abs_err:.3g}, "
            f"max rel err {self.max_rel_err:.3g})"
        )


@dataclasses.dataclass(frozen=True)
class Comparison:
    max_abs_err: float
    max_rel_err: float
    mismatches: tuple[Mismatch, ...]

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def describe(self) -> str:
        if self.ok:
            return "matches eager"
        return "; ".join(m.describe() for m in self.mismatches[:3])


ERROR_CHUNK = 2**26  # elements per float64 slice: a few 512 MiB temporaries, not the whole output's


def _diffs(a: torch.Tensor, b: torch.Tensor) -> Iterator[torch.Tensor]:
    """|a - b| in float64, one slice at a time (a vocabulary-wide logits tensor is 10 GiB in
    float64)."""
    x, y = a.reshape(-1), b.reshape(-1)
    for i in range(0, x.numel(), ERROR_CHUNK):
        yield (x[i : i + ERROR_CHUNK].double() - y[i : i + ERROR_CHUNK].double()).abs()


def _rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    if not a.numel():
        return 0.0
    return (sum(float(d.square().sum()) for d in _diffs(a, b)) / a.numel()) ** 0.5


def _max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return max(float(d.max()) for d in _diffs(a, b)) if a.numel() else 0.0


def _errors(actual: torch.Tensor, expected: torch.Tensor) -> tuple[float, float]:
    """(max absolute, max relative) error, computed slice by slice in float64 so that a
    multi-gigabyte output (KernelBench's 6 GiB log-softmax) does not need 5x its size."""
    if actual.numel() == 0:
        return 0.0, 0.0
    a, e = actual.reshape(-1), expected.reshape(-1)
    worst_abs = worst_rel = 0.0
    for start in range(0, a.numel(), ERROR_CHUNK):
        diff = (
            a[start : start + ERROR_CHUNK].double() - e[start : start + ERROR_CHUNK].double()
        ).abs()
        if not bool(torch.isfinite(diff).all()):
            return float("inf"), float("inf")
        # Relative error only where the reference is not ~0 (there only the absolute error
        # means anything); 1e-6 is far below every dtype's atol.
        ref = e[start : start + ERROR_CHUNK].double().abs()
        rel = torch.where(ref > 1e-6, diff / ref.clamp_min(1e-6), torch.zeros_like(diff))
        worst_abs, worst_rel = max(worst_abs, float(diff.max())), max(worst_rel, float(rel.max()))
    return worst_abs, worst_rel


def compare_one(
    name: str,
    actual: torch.Tensor,
    expected: torch.Tensor,
    fp64: torch.Tensor | None = None,
) -> Mismatch | None:
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return Mismatch(
            name, float("inf"), float("inf"),
            f"got {tuple(actual.shape)} {actual.dtype}, eager gives "
            f"{tuple(expected.shape)} {expected.dtype}",
        )  # fmt: skip
    abs_err, rel_err = _errors(actual, expected)
    rtol, atol = tolerance(expected.dtype)
    if _bad_count(actual, expected, rtol, atol) == 0:
        return None
    if fp64 is not None and expected.is_floating_point() and expected.dtype != torch.float64:
        mode_err, eager_err = _rmse(actual, fp64), _rmse(expected, fp64)
        mode_max, eager_max = _max_err(actual, fp64), _max_err(expected, fp64)
        slack = atol / 10  # as Dynamo's same()
        if mode_err <= FP64_RMSE_MULTIPLIER * eager_err + slack and (
            mode_max <= FP64_MAX_MULTIPLIER * eager_max + slack
        ):
            return None
        return Mismatch(
            name, abs_err, rel_err,
            f"vs float64: rmse {mode_err:.3g} (eager {eager_err:.3g}), "
            f"max err {mode_max:.3g} (eager {eager_max:.3g})",
        )  # fmt: skip
    bad = _bad_count(actual, expected, rtol, atol)
    return Mismatch(
        name, abs_err, rel_err,
        f"{bad} of {expected.numel()} elements outside rtol={rtol:g} atol={atol:g}",
    )  # fmt: skip


def _bad_count(actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> int:
    """Elements outside the tolerance (floats) or different (others), slice by slice."""
    a, e = actual.reshape(-1), expected.reshape(-1)
    bad = 0
    for start in range(0, a.numel(), ERROR_CHUNK):
        x, y = a[start : start + ERROR_CHUNK], e[start : start + ERROR_CHUNK]
        if expected.is_floating_point():
            close = torch.isclose(x, y, rtol=rtol, atol=atol, equal_nan=True)
        else:
            close = x == y
        bad += int((~close).sum())
    return bad


def needs_fp64(actual: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor]) -> bool:
    """Whether some floating tensor misses the elementwise tolerance (only then is a float64
    reference run worth its cost)."""
    for name, exp in expected.items():
        act = actual.get(name)
        if act is None or act.shape != exp.shape or act.dtype != exp.dtype:
            continue
        floating = exp.is_floating_point() and exp.dtype != torch.float64
        if floating and _bad_count(act, exp, *tolerance(exp.dtype)):
            return True
    return False


def compare(
    actual: Mapping[str, torch.Tensor],
    expected: Mapping[str, torch.Tensor],
    fp64: Mapping[str, torch.Tensor] | None = None,
) -> Comparison:
    """Compare every named tensor of eager's (`expected`) with the mode's (`actual`)."""
    mismatches: list[Mismatch] = []
    max_abs = max_rel = 0.0
    for name, exp in expected.items():
        act = actual.get(name)
        if act is None:
            mismatches.append(Mismatch(name, float("inf"), float("inf"), "missing"))
            continue
        ref64 = fp64.get(name) if fp64 is not None else None
        found = compare_one(name, act, exp, ref64)
        if act.shape == exp.shape and act.dtype == exp.dtype:
            abs_err, rel_err = _errors(act, exp)
            max_abs, max_rel = max(max_abs, abs_err), max(max_rel, rel_err)
        if found is not None:
            mismatches.append(found)
    extra = sorted(set(actual) - set(expected))
    for name in extra:
        mismatches.append(Mismatch(name, float("inf"), float("inf"), "not produced by eager"))
    return Comparison(max_abs, max_rel, tuple(mismatches))
