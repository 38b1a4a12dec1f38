"""On a Hopper GPU: the "conv_cutlass" spec of a real graph's convolution (a channels-last
Conv2d in bf16, and in float32 under PyTorch's default TF32 for convolutions) built by the
background builder, run through its module (kernelpro::cutlass_conv) and checked as the search
checks a candidate."""

from __future__ import annotations

import pytest
import torch
from harness import collect
from helpers import HOPPER_CUTLASS

from kernelpro_backend.codegen.build import SpecKernel
from kernelpro_backend.codegen.cutlass_conv_match import conv_cutlass_specs
from kernelpro_backend.lowering import lower
from kernelpro_backend.runtime.compare import compare
from kernelpro_backend.runtime.cuda import host as cuda_host
from kernelpro_backend.runtime.validate import compute_reference
from kernelpro_backend.tuner.cutlass_builds import CutlassBuilds

pytestmark = HOPPER_CUTLASS
CASES = {  # (dtype, c, k, kernel, stride, padding)
    "bf16-3x3": (torch.bfloat16, 64, 128, 3, 1, 1),
    "bf16-1x1-s2": (torch.bfloat16, 256, 64, 1, 2, 0),
    "fp32-tf32-3x3-s2": (torch.float32, 32, 64, 3, 2, 1),
}


def _spec(case: str):  # type: ignore[no-untyped-def]
    dtype, c, k, r, stride, pad = CASES[case]
    conv = torch.nn.Conv2d(c, k, r, stride=stride, padding=pad, bias=False)
    conv = conv.cuda().to(dtype).to(memory_format=torch.channels_last)
    x = torch.randn(8, c, 30, 30, device="cuda", dtype=dtype)
    x = x.contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        (sg,) = [s for s in collect(conv, (x,), train=False) if s.pattern == "convolution"]
    specs = conv_cutlass_specs(lower(sg))
    assert specs, "no conv_cutlass spec"
    return sg, specs[0]


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):  # type: ignore[no-untyped-def]
    folder = tmp_path_factory.mktemp("cutlass-conv-libraries")
    specs = [_spec(case)[1] for case in CASES]
    builds = CutlassBuilds(folder, len(specs))
    assert builds.build(specs, timeout_s=900), builds.failed
    return folder


@pytest.mark.parametrize("case", list(CASES))
def test_a_real_graphs_conv_runs_as_cutlass(case: str, libraries, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(cuda_host, "_LIBRARY_DIR", [libraries])
    sg, spec = _spec(case)
    with torch.no_grad():
        inputs = sg.make_inputs(0, "cuda")
        (got,) = SpecKernel(spec)(*inputs)
        ref = compute_reference(sg.module(), inputs)
        rejection, _ = compare(0, got, ref.exact[0], ref.eager[0] if ref.eager else None)
        assert rejection is None, rejection


def test_a_real_graphs_conv_backward_runs_as_dgrad_and_wgrad(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The backward of a channels-last bf16 Conv2d trained one step: the input and weight
    gradients as CUTLASS's dgrad and wgrad, each checked as the search checks a candidate."""
    monkeypatch.setattr(cuda_host, "_LIBRARY_DIR", [tmp_path])
    conv = torch.nn.Conv2d(64, 128, 3, padding=1, bias=False).cuda().bfloat16()
    conv = conv.to(memory_format=torch.channels_last)
    x = torch.randn(8, 64, 30, 30, device="cuda", dtype=torch.bfloat16)
    x = x.contiguous(memory_format=torch.channels_last).requires_grad_()
    (sg,) = [s for s in collect(conv, (x,), train=True) if s.pattern == "convolution_backward"]
    spec = conv_cutlass_specs(lower(sg))[0]
    builds = CutlassBuilds(tmp_path, 2)
    assert builds.build([spec], timeout_s=900), builds.failed
    with torch.no_grad():
        inputs = sg.make_inputs(0, "cuda")
        got = SpecKernel(spec)(*inputs)
        ref = compute_reference(sg.module(), inputs)
        for i, out in enumerate(got):
            eager = ref.eager[i] if ref.eager else None
            rejection, _ = compare(i, out, ref.exact[i], eager)
            assert rejection is None, (i, rejection)
