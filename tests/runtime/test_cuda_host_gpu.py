"""The CUTLASS 3 GEMM on the GPU: each schedule with bias + GELU and with a residual source
matches PyTorch within bf16 rounding (against float64, no worse than eager's own error)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernelpro_backend.codegen.template_cutlass import ENTRY_POINTS, CutlassGemm
from kernelpro_backend.runtime.cuda_compile import cutlass_include_dirs, find_nvcc
from kernelpro_backend.runtime.cuda_host import HostGemm, compile_library

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
        reason="needs a Hopper GPU",
    ),
    pytest.mark.skipif(
        find_nvcc() is None or not cutlass_include_dirs(), reason="needs nvcc and CUTLASS"
    ),
]


@pytest.mark.parametrize("schedule", ["pingpong", "cooperative"])
@pytest.mark.parametrize("residual", [False, True])
def test_matches_pytorch(schedule: str, residual: bool, tmp_path) -> None:
    act = "identity" if residual else "gelu"
    config = CutlassGemm(activation=act, bias=True, source=residual, schedule=schedule)
    path = compile_library(
        config.source_text(), "sm_90a", library_dir=tmp_path, symbols=ENTRY_POINTS
    )
    m, k, n = 1000, 512, 768  # M not a multiple of the tile
    x = torch.randn(m, k, device="cuda").bfloat16()
    w = (torch.randn(n, k, device="cuda") / k**0.5).bfloat16()
    b = torch.randn(n, device="cuda").bfloat16()
    r = torch.randn(m, n, device="cuda").bfloat16() if residual else None
    ref = F.linear(x.double(), w.double(), b.double())
    ref = ref + r.double() if residual else F.gelu(ref)
    eager = F.linear(x, w, b)
    eager = eager + r if residual else F.gelu(eager)
    got = HostGemm(path, bias=True, source=residual)(x, w, b, r)
    assert got.shape == (m, n) and got.dtype == torch.bfloat16
    assert (got.double() - ref).abs().max() <= 2 * (eager.double() - ref).abs().max() + 1e-2
