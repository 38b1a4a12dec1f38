"""GPU tier of the one-pass variance (VARIANCE=welford, templates/row_welford.py): a batch
norm's training statistics at ResNet-50's first-stage size, compiled for the device and
checked against the subgraph's reference beside the two-pass form, NCHW and channels-last."""

from __future__ import annotations

import pytest
import torch

from kernelpro_backend.lowering import lower

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_batch_norm_statistics_in_one_pass_match_on_gpu(channels_last: bool) -> None:
    from harness import check, collect
    from test_variance import _BatchNorm

    x = torch.randn(32, 64, 56, 56, device="cuda")
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    model = _BatchNorm().cuda()
    model.bn = torch.nn.BatchNorm2d(64).cuda()
    (sg,) = [s for s in collect(model, [x], train=False) if s.kind == "reduction"]
    spec = lower(sg)
    assert spec.knob("BLOCK_C") < 32 * 56 * 56  # the row loops
    check(sg, spec)
    check(sg, spec.with_knobs(VARIANCE="welford"))
