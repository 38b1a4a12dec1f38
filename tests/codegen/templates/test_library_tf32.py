"""The tf32 form of the GEMM library template (codegen/templates/tf32.py): a float32 GEMM with an
elementwise epilogue under PyTorch's tf32 policy as one TF32 product of operands rounded to
nearest (as cuBLAS rounds them), one operand rounded by a pass into a K-major copy, the other in
registers. Checked here under the Triton interpreter against the product of the rounded
operands, and its rounding against runtime/validate.round_to_tf32 bit for bit."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch._inductor.decomposition import select_decomp_table
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._python_dispatch import TorchDispatchMode

from kernelpro_backend.codegen import alternatives, knob_space, render
from kernelpro_backend.codegen.templates import tf32 as t1
from kernelpro_backend.codegen.templates.library import library_epilogue
from kernelpro_backend.fx_passes import find_subgraphs
from kernelpro_backend.lowering import lower
from kernelpro_backend.runtime.spec_kernel import build_kernel
from kernelpro_backend.runtime.validate import round_to_tf32


def _tf32_seed(fn, *inputs):
    gm = make_fx(fn, tracing_mode="fake", decomposition_table=select_decomp_table())(*inputs)
    (sg,) = [s for s in find_subgraphs(gm, "inference") if s.kind == "gemm"]
    return sg, dataclasses.replace(lower(sg), precision="tf32")


def _form(seed):
    (alt,) = [a for a in alternatives(seed) if a.template == "gemm_library"]
    return alt


def _truncated(x: torch.Tensor) -> torch.Tensor:
    return (x.view(torch.int32) & -8192).view(torch.float32)


class _CastOperands(TorchDispatchMode):
    """Run matrix products in float64 on their float32 operands passed through `cast`."""

    def __init__(self, cast):
        super().__init__()
        self.cast = cast

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        if name in ("aten::mm", "aten::addmm"):
            operands = (1, 2) if name == "aten::addmm" else (0, 1)
            args = tuple(
                self.cast(a.float()).double() if i in operands else a for i, a in enumerate(args)
            )
        return func(*args, **(kwargs or {}))


def _run_rounded(sg, spec, seed=0):
    """(the form's outputs, the subgraph in float64 with its matrix products' operands rounded
    to TF32, the same with them truncated), on the subgraph's fresh inputs: the form must be
    the first within float32's accumulation error, and nearer it than the second."""
    inputs = sg.make_inputs(seed)
    got = build_kernel(spec)(*inputs)

    def ref(cast):
        with _CastOperands(cast):
            return sg.module()(*[x.double() for x in inputs])

    return got, ref(round_to_tf32), ref(_truncated)


_CASES = {  # (fn, shapes): B as mm reads it, as nn.Linear's weight, A^T @ B; K not a multiple
    "mm": (lambda x, y: (torch.mm(x, y),), [(40, 64), (64, 56)]),
    "linear": (lambda x, w: (torch.mm(x, w.t()),), [(40, 24), (56, 24)]),
    "wgrad": (lambda x, y: (torch.mm(x.t(), y),), [(40, 24), (40, 56)]),
    "tall": (lambda x, y: (torch.mm(x, y),), [(72, 40), (40, 8)]),  # Y = B^T, 8 rows
}


@pytest.mark.parametrize("case", sorted(_CASES))
def test_a_float32_gemm_under_tf32_runs_as_one_product_of_rounded_operands(case):
    fn, shapes = _CASES[case]
    sg, seed = _tf32_seed(fn, *(torch.randn(*s) for s in shapes))
    alt = _form(seed)
    assert library_epilogue(alt) == "tf32" and knob_space(alt) == {}
    source = render(alt).source
    assert source.count('input_precision="tf32"') == 1 and source.count("_launch(_round)") == 1
    (got,), (exact,), (truncated,) = _run_rounded(sg, alt)
    err = float((got.double() - exact).abs().max())
    assert err < 1e-4, case
    # rounding, not truncation: the truncated operands' product is measurably further away
    assert float((truncated - exact).abs().max()) > 50 * max(err, 1e-6)


def test_the_rounded_copy_is_of_the_operand_with_fewer_rows():
    fn, shapes = _CASES["tall"]  # A 72x40, B 40x8: B^T has 8 rows, A 72
    _, seed = _tf32_seed(fn, *(torch.randn(*s) for s in shapes))
    o = t1.orientation(_form(seed))
    assert not o.swapped and o.y[4] == 8 and not o.raw
    _, seed = _tf32_seed(fn, torch.randn(8, 40), torch.randn(40, 72))
    o = t1.orientation(_form(seed))
    assert o.swapped and o.y[4] == 8 and not o.raw


def test_the_rounding_pass_matches_cvt_rna_bit_for_bit():
    """The pass's `_rna` against round_to_tf32 (which tests/runtime checks against the
    definition of cvt.rna): ties away from zero both signs, carries into the exponent,
    float32's largest values (to infinity), subnormals, zeros, infinities and NaN payloads."""
    special = [
        0x3F801000, 0xBF801000, 0x3F800FFF, 0x3F801001, 0x3FFFF000, 0x7F7FFFFF, 0x7F7FEFFF,
        0xFF7FFFFF, 0x00001000, 0x00000FFF, 0x80001000, 0x00000000, 0x80000000, 0x7F800000,
        0xFF800000, 0x7FC00000, 0x7FFFFFFF, 0xFFFFFFFF, 0x7F800001,
    ]  # fmt: skip
    bits = torch.tensor(special, dtype=torch.int64).to(torch.uint32).view(torch.int32)
    x = torch.cat([bits.view(torch.float32), torch.randn(64 * 64 - len(special)) * 1e3])
    x = x.view(64, 64)
    sg, seed = _tf32_seed(lambda a, b: (torch.mm(a, b),), torch.randn(8, 64), x)
    alt = _form(seed)
    ns: dict = {}
    exec(compile(render(alt).source, "<tf32>", "exec"), ns)  # noqa: S102 - our own rendering
    out = torch.full((64, 64), 7.0)
    ns["_round"][(1, 1)](x, 0, out, 64, 64, 64, 64, 64, 1, 64, 1, BLOCK=64)
    want = round_to_tf32(x)
    same = (out.view(torch.int32) == want.view(torch.int32)) | (out.isnan() & want.isnan())
    assert bool(same.all()), x.view(-1)[~same.view(-1)]


def _epilogue(x, w, b, r):
    return (F.gelu(F.linear(x, w, b)) * 0.5 + r,)


def test_an_epilogue_is_applied_to_the_accumulator_under_tf32():
    inputs = [torch.randn(40, 24), torch.randn(56, 24), torch.randn(56), torch.randn(40, 56)]
    sg, seed = _tf32_seed(_epilogue, *inputs)
    alt = _form(seed)
    assert library_epilogue(alt) == "tf32"
    (got,), (exact,), _ = _run_rounded(sg, alt, seed=1)
    assert float((got.double() - exact).abs().max()) < 1e-4


def test_under_tf32_bias_relu_keeps_cublaslt_and_reductions_get_no_form():
    relu = lambda x, w, b: (F.relu(F.linear(x, w, b)),)  # noqa: E731
    _, seed = _tf32_seed(relu, torch.randn(16, 8), torch.randn(24, 8), torch.randn(24))
    assert library_epilogue(_form(seed)) == "relu"
    summed = lambda x, w: (torch.mm(x, w).sum(dim=1),)  # noqa: E731
    _, seed = _tf32_seed(summed, torch.randn(16, 8), torch.randn(8, 24))
    assert library_epilogue(seed) is None
    ieee = dataclasses.replace(seed, precision="ieee")
    assert library_epilogue(ieee) is None
