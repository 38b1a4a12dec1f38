"""The GEMM library template: a GEMM whose epilogue is exactly bias + ReLU gets cuBLASLt's fused
call as an alternative of its seed, and that call computes the subgraph (operands as the
subgraph lays them out, the transposed weight of nn.Linear included); other epilogues,
batched GEMMs and tf32x3 do not get it."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from harness import check
from torch._inductor.decomposition import select_decomp_table
from torch.fx.experimental.proxy_tensor import make_fx

from kernelpro_backend.codegen import IllegalSpec, alternatives, knob_space, render
from kernelpro_backend.fx_passes import find_subgraphs
from kernelpro_backend.lowering import lower


def _seed(fn, *inputs):
    gm = make_fx(fn, tracing_mode="fake", decomposition_table=select_decomp_table())(*inputs)
    (sg,) = [s for s in find_subgraphs(gm, "inference") if s.kind == "gemm"]
    return sg, lower(sg)


def _linear_relu(x, w, b):
    return (F.relu(F.linear(x, w, b)),)


def _addmm_relu(x, w, b):
    return (torch.relu(torch.addmm(b, x, w)),)


@pytest.mark.parametrize(
    ("fn", "shapes"),
    [(_linear_relu, [(64, 32), (48, 32), (48,)]), (_addmm_relu, [(20, 12), (12, 40), (40,)])],
)
def test_a_bias_relu_gemm_runs_as_the_library_call(fn, shapes):
    sg, seed = _seed(fn, *(torch.randn(*s) for s in shapes))
    (alt,) = [a for a in alternatives(seed) if a.template == "gemm_library"]
    assert knob_space(alt) == {} and "_addmm_activation" in render(alt).source
    check(sg, alt)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, w, b: (F.gelu(F.linear(x, w, b)),),  # erf GELU: not cuBLASLt's
        lambda x, w, b: (F.relu(F.linear(x, w, b)) * 2.0,),  # more epilogue than it fuses
        lambda x, w, b: (F.linear(x, w, b),),  # nothing to fuse: the fallback's own call
    ],
)
def test_other_epilogues_get_no_library_alternative(fn):
    _, seed = _seed(fn, torch.randn(16, 8), torch.randn(24, 8), torch.randn(24))
    assert not [a for a in alternatives(seed) if a.template == "gemm_library"]


def test_tf32x3_and_a_hand_made_spec_of_another_gemm_are_refused():
    _, seed = _seed(_linear_relu, torch.randn(16, 8), torch.randn(24, 8), torch.randn(24))
    assert not [
        a
        for a in alternatives(dataclasses.replace(seed, precision="tf32x3"))
        if a.template == "gemm_library"
    ]
    _, other = _seed(
        lambda x, w, b: (F.gelu(F.linear(x, w, b)),),
        torch.randn(16, 8),
        torch.randn(24, 8),
        torch.randn(24),
    )
    with pytest.raises(IllegalSpec, match="relu"):
        dataclasses.replace(other, template="gemm_library", knobs=())


class _LibraryProvider:
    """Kernels for the bias + ReLU GEMMs only: their library alternative."""

    def __init__(self) -> None:
        self.given = 0

    def find(self, sg):
        if sg.kind != "gemm":
            return None
        from kernelpro_backend.runtime.spec_kernel import build_kernel

        alts = [a for a in alternatives(lower(sg)) if a.template == "gemm_library"]
        if not alts:
            return None
        self.given += 1
        return build_kernel(alts[0])


@pytest.mark.parametrize("fallback", ["inductor", "eager"])  # inlined, behind kernelpro::launch
def test_a_model_trains_through_the_library_kernel_like_eager(fallback):
    from kernelpro_backend import make_backend

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU(), torch.nn.Linear(48, 8))
    ref = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU(), torch.nn.Linear(48, 8))
    ref.load_state_dict(model.state_dict())
    provider = _LibraryProvider()
    torch._dynamo.reset()
    compiled = torch.compile(
        model, backend=make_backend(provider=provider), options={"fallback": fallback}
    )
    x = torch.randn(16, 32)
    out, want = compiled(x), ref(x)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    out.square().sum().backward()
    want.square().sum().backward()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    assert provider.given >= 1


def test_the_library_kernel_has_nothing_to_precompile():
    """The worker precompiles Triton kernels outside the GPU lock by calling the entry with a
    compile-only launcher; a library call would run there, so it is skipped."""
    from kernelpro_backend.runtime.spec_kernel import build_kernel

    _, seed = _seed(_linear_relu, torch.randn(16, 8), torch.randn(24, 8), torch.randn(24))
    (alt,) = [a for a in alternatives(seed) if a.template == "gemm_library"]
    assert build_kernel(seed).precompiles and not build_kernel(alt).precompiles
