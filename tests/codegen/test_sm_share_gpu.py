"""GPU tier of SM_SHARE (a row kernel's grid capped at a share of the SMs, each program looping
over row blocks): compiled for the device at a bench row's size and checked against the
subgraph's reference at every share, looped columns and pointwise kernels included."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernelpro_backend.lowering import lower

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


@pytest.mark.parametrize("share", [25, 100, 200])
@pytest.mark.parametrize(
    ("fn", "block_c"),
    [
        (lambda x: (torch.softmax(x, -1),), 4096),
        (lambda x: (torch.log_softmax(x, -1),), 1024),
        (lambda x: (F.gelu(x) * 2 + 1,), 4096),
    ],
    ids=["softmax", "looped-log-softmax", "pointwise"],
)
def test_a_capped_grid_matches_on_gpu(fn, block_c: int, share: int) -> None:
    from harness import check, decomposed_subgraph

    x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    sg = decomposed_subgraph(fn, x)
    check(sg, lower(sg).with_knobs(ROWS=2, BLOCK_C=block_c, num_warps=8, SM_SHARE=share))
