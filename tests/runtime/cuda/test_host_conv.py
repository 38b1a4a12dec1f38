"""The CUTLASS 3 convolution with a host entry point: configurations are checked on
construction (TF32 wgrad refused), each operator's source names its CUTLASS operator and
output layout, and, where nvcc and the CUTLASS headers are present, the forward compiles for
sm_90a (with CUTLASS's util headers, which its conv collectives include) into a library that
exports the entry points and loads without a GPU; the host wrapper refuses operands that are
not packed channels-last before any CUDA call. (Running it needs a GPU:
tests/runtime/cuda/test_host_conv_gpu.py.)"""

from __future__ import annotations

import pytest
import torch

from kernelpro_backend.codegen.templates.cutlass import CutlassConfigError
from kernelpro_backend.codegen.templates.cutlass_conv import ENTRY_POINTS, CutlassConv
from kernelpro_backend.runtime.cuda import host as cuda_host
from kernelpro_backend.runtime.cuda.compile import (
    cutlass_include_dirs,
    find_nvcc,
)
from kernelpro_backend.runtime.cuda.host_conv import ConvProblem, HostConv
from kernelpro_backend.runtime.errors import CandidateLoadError


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (dict(operator="deconv"), "operator"),
        (dict(dtype="float64"), "dtype"),
        (dict(tile=(256, 128, 64)), "tile"),
        (dict(dtype="float32", tile=(128, 128, 64)), "K in"),
        (dict(cluster=(4, 1)), "cluster"),
        (dict(operator="wgrad", dtype="float32", tile=(128, 128, 32)), "K-major"),
    ],
)
def test_unbuildable_configurations_are_refused(change: dict, words: str) -> None:
    with pytest.raises(CutlassConfigError, match=words):
        CutlassConv(**change)


@pytest.mark.parametrize(
    ("operator", "layout"),
    [("fprop", "TensorNHWC"), ("dgrad", "TensorNHWC"), ("wgrad", "TensorKCSR")],
)
def test_each_operator_names_its_cutlass_operator_and_output(operator: str, layout: str) -> None:
    text = CutlassConv(operator=operator).source_text()
    kind = {"fprop": "kFprop", "dgrad": "kDgrad", "wgrad": "kWgrad"}[operator]
    assert f"cutlass::conv::Operator::{kind}" in text
    assert f"cutlass::layout::{layout}, kAlign, Element" in text
    assert all(f'extern "C" {ret} {name}(' in text for ret, name in zip(
        ("size_t", "int"), ENTRY_POINTS, strict=True
    ))  # fmt: skip


def test_a_convs_library_flags_name_the_util_headers_and_a_gemms_do_not() -> None:
    conv = cuda_host.library_flags("sm_90a", CutlassConv().source_text())
    gemm = cuda_host.library_flags("sm_90a", '#include "cutlass/gemm/device/gemm.h"')
    util = [f"-I{d}" for d in cutlass_include_dirs(util=True)]
    assert all(flag in conv for flag in util)
    assert not any(flag in gemm for flag in util)


def test_the_problem_gives_torchs_output_size() -> None:
    x, w = torch.empty(2, 8, 17, 19), torch.empty(16, 8, 3, 5)
    problem = ConvProblem.of(x.shape, w.shape, (1, 2), (2, 1), (1, 2))
    want = torch.nn.functional.conv2d(x, w, padding=(1, 2), stride=(2, 1), dilation=(1, 2))
    assert problem.output_hw == tuple(want.shape[2:])
    with pytest.raises(CandidateLoadError, match="dense only"):
        ConvProblem.of(x.shape, (16, 4, 3, 3), (0, 0), (1, 1), (1, 1))


@pytest.mark.skipif(
    find_nvcc() is None or not cutlass_include_dirs() or not cutlass_include_dirs(util=True),
    reason="needs nvcc and the CUTLASS headers (nvidia-cutlass or CUTLASS_PATH)",
)
def test_the_forward_compiles_exports_and_refuses_other_layouts(tmp_path) -> None:
    source = CutlassConv(operator="fprop").source_text()
    path = cuda_host.compile_library(source, "sm_90a", library_dir=tmp_path, symbols=ENTRY_POINTS)
    conv = HostConv(path, "fprop")  # loads without a GPU
    x = torch.zeros(2, 16, 8, 8, dtype=torch.bfloat16)
    w = torch.zeros(32, 16, 3, 3, dtype=torch.bfloat16)
    problem = ConvProblem.of(x.shape, w.shape, (1, 1), (1, 1), (1, 1))
    with pytest.raises(CandidateLoadError, match="channels-last"):
        conv(x, w.contiguous(memory_format=torch.channels_last), problem)  # x is NCHW
    dgrad = HostConv(path, "dgrad")  # the entry points' names are the operator's too
    strided = ConvProblem.of(x.shape, w.shape, (1, 1), (2, 2), (1, 1))
    dy = torch.zeros(2, 32, 4, 4, dtype=torch.bfloat16).contiguous(
        memory_format=torch.channels_last
    )
    w_cl = w.contiguous(memory_format=torch.channels_last)
    with pytest.raises(CandidateLoadError, match="unit strides"):
        dgrad(dy, w_cl, strided)
