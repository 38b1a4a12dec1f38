"""torch.fmod and torch.remainder in generated kernels: the dividend's sign against the
divisor's, on floats and on integers (torch.roll's decomposition indexes with them, as in a
Swin block's shifted windows); checked against the reference under Triton's interpreter."""

from __future__ import annotations

import pytest
import torch
from harness import check, decomposed_subgraph

from kernelpro_backend.codegen.optable_cuda import c_expression
from kernelpro_backend.runtime.cuda.compile import find_nvcc


@pytest.mark.parametrize("op", [torch.fmod, torch.remainder])
def test_float_mod_by_a_constant_and_by_a_tensor(op):
    x = torch.randn(16, 24) * 10

    def fn(a, b):
        return (op(a, 3.0) + op(a, b) * 0.5,)

    b = torch.randn(16, 24).abs() + 0.5
    b[::2] *= -1  # negative divisors too
    check(decomposed_subgraph(fn, x, b))


@pytest.mark.parametrize("op", [torch.fmod, torch.remainder])
def test_integer_mod(op):
    x = torch.randint(-50, 50, (8, 32))

    def fn(a):
        return (op(a, 7) * 2 + op(a, -3),)

    check(decomposed_subgraph(fn, x))


def test_a_roll_after_a_norm():
    """Swin's shifted windows: torch.roll(LayerNorm(x)) over two dims."""

    def fn(x, w, b):
        normed = torch.nn.functional.layer_norm(x, (16,), w, b)
        return (torch.roll(normed, shifts=(-2, -2), dims=(1, 2)) * 2.0,)

    from torch._inductor.decomposition import select_decomp_table
    from torch.fx.experimental.proxy_tensor import make_fx

    from kernelpro_backend.fx_passes import find_subgraphs

    inputs = (torch.randn(2, 8, 8, 16), torch.randn(16), torch.randn(16))
    gm = make_fx(fn, tracing_mode="fake", decomposition_table=select_decomp_table())(*inputs)
    from kernelpro_backend.codegen.errors import Unsupported
    from kernelpro_backend.lowering import lower

    checked = 0
    for sg in find_subgraphs(gm, "inference"):
        try:
            lower(sg)
        except Unsupported as e:  # the roll's index arithmetic alone: folded by the fallback
            assert "reads no tensor" in str(e)
            continue
        check(sg)
        checked += 1
    assert checked


def test_cuda_expressions_take_the_sign_torch_gives():
    assert c_expression("fmod", ["a", "b"], ["float32", "float32"], "float32") == "fmodf(a, b)"
    assert c_expression("fmod", ["a", "b"], ["int32", "int32"], "int32") == "(a % b)"
    rem = c_expression("remainder", ["a", "b"], ["float32", "float32"], "float32")
    assert rem.startswith("(fmodf(a, b) != 0 && ((fmodf(a, b) < 0) != (b < 0))")


def _mod_softmax(x):  # a long-row program with both ops: it gets the CUDA row alternative
    return (torch.softmax(torch.remainder(x, 3.0) - torch.fmod(x, 2.0), dim=-1),)


def test_a_row_program_with_mod_ops_matches_and_gets_the_cuda_row_alternative():
    from harness import cluster_alternatives

    from kernelpro_backend.lowering import lower

    sg = decomposed_subgraph(_mod_softmax, torch.randn(3, 8192) * 5)
    check(sg)
    assert cluster_alternatives(lower(sg))


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed")
def test_the_cuda_row_kernel_with_mod_ops_compiles_for_hopper(tmp_path):
    from harness import cluster_alternatives

    from kernelpro_backend.codegen import render
    from kernelpro_backend.lowering import lower
    from kernelpro_backend.runtime.cuda.compile import compile_cuda

    sg = decomposed_subgraph(_mod_softmax, torch.randn(3, 8192))
    for alt in cluster_alternatives(lower(sg)):
        r = render(alt)
        assert "fmodf(" in r.source
        cubin = compile_cuda(r.source, "sm_90a", kernels=(r.entry,), cubin_dir=tmp_path)
        assert cubin.data[:4] == b"\x7fELF"
