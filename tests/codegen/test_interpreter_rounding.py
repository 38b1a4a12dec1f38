"""The CPU tier's Triton interpreter casts float32 to bfloat16 as the GPU does (round to
nearest even; conftest.py patches the interpreter, which truncates), so bf16 kernels compared
with PyTorch under the interpreter differ only where they would on the GPU."""

from __future__ import annotations

import os

import pytest
import torch
import triton
import triton.language as tl

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="the interpreter's cast (CPU tier)"
)


@triton.jit
def _round_trip(x, y, N: tl.constexpr):
    v = tl.load(x + tl.arange(0, N))
    tl.store(y + tl.arange(0, N), v.to(tl.bfloat16).to(tl.float32))


def test_float32_to_bfloat16_rounds_to_nearest_even():
    # 4.30 truncates to 4.28125 but rounds to 4.3125; 1 + 2**-8 is a tie (rounds to even 1.0),
    # 1 + 3 * 2**-8 a tie rounding up; signs, infinities and NaN kept
    x = torch.tensor([4.30, -4.30, 1 + 2**-8, 1 + 3 * 2**-8, 3e38, float("inf"), 0.0, float("nan")])
    y = torch.empty_like(x)
    _round_trip[(1,)](x, y, N=8)
    want = x.to(torch.bfloat16).float()
    assert y[:7].tolist() == want[:7].tolist() and y[7].isnan()
    assert y[0].item() == 4.3125
