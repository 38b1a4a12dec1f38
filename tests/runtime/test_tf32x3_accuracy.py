"""Under the tf32x3 policy a candidate must be as accurate as IEEE float32: the reference and
the eager error it may match are IEEE, so a plain-TF32 GEMM is rejected there and accepted
under the tf32 policy (CPU: TF32 emulated by rounding the operands)."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from kernelpro_backend.fx_passes import find_subgraphs
from kernelpro_backend.runtime.candidate import SourceCandidate
from kernelpro_backend.runtime.job import Job
from kernelpro_backend.runtime.precision import precision_mode
from kernelpro_backend.runtime.validate import round_to_tf32, validate


def _mm(a, b):
    return (torch.mm(a, b),)


def _ordered(x, y):
    """(a, b) of a @ b from the subgraph's canonical input order."""
    return (x, y) if x.shape == (64, 1024) else (y, x)


def _tf32_kernel(x, y):
    a, b = _ordered(x, y)
    return [torch.mm(round_to_tf32(a), round_to_tf32(b))]


def _ieee_kernel(x, y):
    a, b = _ordered(x, y)
    return [torch.mm(a, b)]


@pytest.mark.parametrize(
    ("policy", "kernel", "accepted"),
    [
        ("tf32", _tf32_kernel, True),
        ("tf32x3", _tf32_kernel, False),
        ("tf32x3", _ieee_kernel, True),
    ],
)
def test_tf32x3_candidates_are_held_to_ieee_accuracy(policy, kernel, accepted):
    gm = make_fx(_mm, tracing_mode="fake")(torch.randn(64, 1024), torch.randn(1024, 64))
    (sg,) = find_subgraphs(gm, "inference", precision_option=policy)
    job = Job.from_subgraph(sg, SourceCandidate("triton", "", "entry"))
    with precision_mode(job.precision):
        rejection, details = validate(kernel, sg.module(), job, torch.device("cpu"))
    assert (rejection is None) == accepted, rejection and rejection.message
    if accepted and policy == "tf32x3":
        # the accuracy the policy promises, measured: the kernel's error against float64 and
        # IEEE float32 eager's on the same inputs (equal here: the kernel is an IEEE GEMM)
        assert details["max_abs_error"] == details["ieee_max_abs_error"] > 0


def test_the_policies_set_pytorchs_matmul_mode():
    for policy, mode in (("ieee", "highest"), ("tf32", "high"), ("tf32x3", "highest")):
        with precision_mode(policy):
            assert torch.get_float32_matmul_precision() == mode
