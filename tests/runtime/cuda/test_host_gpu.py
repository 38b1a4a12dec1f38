"""The CUTLASS 3 GEMM on the GPU: each schedule with bias + GELU and with a residual source
matches PyTorch within bf16 rounding (against float64, no worse than eager's own error)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
import torch.nn.functional as F
from helpers import HOPPER_CUTLASS

from kernelpro_backend.codegen.templates.cutlass import ENTRY_POINTS, CutlassGemm
from kernelpro_backend.runtime.cuda.host import HostGemm, compile_library

pytestmark = HOPPER_CUTLASS


SCHEDULES, LAYOUTS = ("pingpong", "cooperative", "stream_k"), (("k", "n"), ("m", "n"), ("m", "k"))


def _epilogue_config(schedule: str, residual: bool) -> CutlassGemm:
    act = "identity" if residual else "gelu"
    return CutlassGemm(activation=act, bias=True, source=residual, schedule=schedule)


@pytest.fixture(scope="module")
def library_dir(tmp_path_factory):  # type: ignore[no-untyped-def]
    """Every library this module runs, built at once (one nvcc each, 1-2 minutes): built one
    test at a time, the file took longer than a device call's limit. compile_library then
    finds each one in this folder."""
    folder = tmp_path_factory.mktemp("cutlass-host")
    configs = [_epilogue_config(s, r) for s in SCHEDULES for r in (False, True)]
    configs += [CutlassGemm(a_major=a, b_major=b) for a, b in LAYOUTS]

    def build(config: CutlassGemm) -> None:  # nvcc's limit allows for the builds beside it
        compile_library(
            config.source_text(), "sm_90a", library_dir=folder, symbols=ENTRY_POINTS,
            timeout_s=900,
        )  # fmt: skip

    at_once = max(1, min(len(configs), (os.cpu_count() or 2) // 2))
    with ThreadPoolExecutor(at_once) as pool:
        list(pool.map(build, configs))  # a failed build raises here, in every test's setup
    return folder


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("residual", [False, True])
def test_matches_pytorch(schedule: str, residual: bool, library_dir) -> None:  # type: ignore[no-untyped-def]
    config = _epilogue_config(schedule, residual)
    path = compile_library(
        config.source_text(), "sm_90a", library_dir=library_dir, symbols=ENTRY_POINTS
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


@pytest.mark.parametrize(("a_major", "b_major"), LAYOUTS)
def test_transposed_operands_match_pytorch(a_major: str, b_major: str, library_dir) -> None:  # type: ignore[no-untyped-def]
    """The backward's GEMMs: dx = dy @ W (B with N contiguous) and dW = dy^T @ x (A with M
    contiguous), and the remaining combination, against float64."""
    config = CutlassGemm(a_major=a_major, b_major=b_major)
    path = compile_library(
        config.source_text(), "sm_90a", library_dir=library_dir, symbols=ENTRY_POINTS
    )
    m, k, n = 1000, 512, 768
    a = torch.randn(m, k, device="cuda").bfloat16()
    b = (torch.randn(n, k, device="cuda") / k**0.5).bfloat16()
    if a_major == "m":
        a = a.t().contiguous().t()  # [M, K] with M contiguous
    if b_major == "n":
        b = b.t().contiguous().t()  # [N, K] with N contiguous
    gemm = HostGemm(path, bias=False, source=False)
    assert (gemm.a_major, gemm.b_major) == (a_major, b_major)
    ref = a.double() @ b.double().t()
    eager = a @ b.t()
    got = gemm(a, b)
    assert (got.double() - ref).abs().max() <= 2 * (eager.double() - ref).abs().max() + 1e-2
