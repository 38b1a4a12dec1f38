"""GPU tier of split rows ("row_split"): a loss's mean over every element of a large input and
few long rows, built for the device and checked against the subgraph's reference on fresh
inputs at the default SPLIT, a small one and the largest legal one."""

from __future__ import annotations

import pytest
import torch

from kernelpro_backend.codegen import alternatives, knob_space
from kernelpro_backend.lowering import lower

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


class _Fn(torch.nn.Module):
    def __init__(self, fn) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.fn = fn

    def forward(self, *xs: torch.Tensor):  # type: ignore[no-untyped-def]
        return self.fn(*xs)


@pytest.mark.parametrize(
    ("fn", "shapes"),
    [
        (
            lambda p, t: torch.mean((p - t) ** 2),
            [(4096, 4096), (4096, 4096)],
        ),  # KernelBench L1_94's form
        (lambda x: x.sum(-1), [(16, 1 << 20)]),
        (lambda x: x.amax(-1), [(7, 300001)]),
    ],
    ids=["mse_mean", "sum_rows", "max_odd_rows"],
)
def test_split_rows_match_reference(fn, shapes) -> None:  # type: ignore[no-untyped-def]
    from harness import check, collect

    inputs = [torch.randn(*s, device="cuda") for s in shapes]
    checked = 0
    for sg in collect(_Fn(fn), inputs, train=False):
        for alt in alternatives(lower(sg)):
            if alt.template != "row_split":
                continue
            splits = knob_space(alt)["SPLIT"]
            for spec in {alt, alt.with_knobs(SPLIT=splits[0]), alt.with_knobs(SPLIT=splits[-1])}:
                check(sg, spec)
                checked += 1
    assert checked >= 2


def test_batch_norm_at_resnet_size_matches() -> None:
    """ResNet-50's first stage (64 channels of 32x56x56, NCHW): the forward's statistics
    (Welford per chunk) and the backward's sums over N, H, W split, with the normalised output
    and the input gradient written by the combining kernel's chunks."""
    from harness import check, collect

    from kernelpro_backend.codegen.cluster_rules import per_element_stores

    bn = torch.nn.BatchNorm2d(64).cuda()
    x = torch.randn(32, 64, 56, 56, device="cuda", requires_grad=True)
    checked = 0
    for sg in collect(_Fn(lambda x: bn(x).relu()), [x]):
        for alt in alternatives(lower(sg)):
            if alt.template == "row_split" and per_element_stores(alt):
                check(sg, alt)
                check(sg, alt.with_knobs(SPLIT=knob_space(alt)["SPLIT"][0]))
                checked += 1
    assert checked >= 2  # the forward's and the backward's
