"""The GEMM library template: a GEMM whose epilogue is exactly bias + ReLU gets cuBLASLt's fused
call as an alternative of its seed, and that call computes the subgraph (operands as the
subgraph lays them out, the transposed weight of nn.Linear included); other epilogues,
batched GEMMs and tf32x3 do not get it. A float32 GEMM with an elementwise epilogue under
tf32x3 gets the 3xTF32 form (an exact split into TF32 parts, three TF32 products per K step),
checked here under the Triton interpreter."""

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
    [
        (_linear_relu, [(64, 32), (48, 32), (48,)]),
        (_addmm_relu, [(20, 12), (12, 40), (40,)]),
        # a Linear on a transformer's [B, T, d] activations: its [B * T, N] GEMM's output,
        # viewed as [B, T, N]; and on one vector (M = 1, the output [N])
        (_linear_relu, [(2, 8, 32), (48, 32), (48,)]),
        (_linear_relu, [(32,), (48, 32), (48,)]),
    ],
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


def _tf32_parts(x: torch.Tensor) -> bool:
    """Every value exact in TF32: the 13 low mantissa bits are zero."""
    return bool(((x.view(torch.int32) & 0x1FFF) == 0).all())


@pytest.mark.parametrize(("transposed", "k"), [(False, 24), (True, 24), (False, 64)])
def test_a_plain_float32_gemm_under_tf32x3_runs_as_three_tf32_products(transposed, k):
    a, b = torch.randn(40, k), torch.randn(k, 56)
    fn = (lambda x, y: (torch.mm(x, y.t()),)) if transposed else (lambda x, y: (torch.mm(x, y),))
    sg, seed = _seed(fn, a, b.t().contiguous() if transposed else b)
    seed = dataclasses.replace(seed, precision="tf32x3")
    (alt,) = [a for a in alternatives(seed) if a.template == "gemm_library"]
    source = render(alt).source
    assert "_split" in source and source.count('input_precision="tf32"') == 3
    check(sg, alt)


def test_under_tf32x3_an_a_of_any_strides_is_split_inside_the_product_kernel():
    # A (here a column-major view, K not a multiple of BLOCK_K) is read where it lies and split
    # in registers; only B goes through the split pass
    a, b = torch.randn(40, 24), torch.randn(40, 56)
    sg, seed = _seed(lambda x, y: (torch.mm(x.t(), y),), a, b)
    seed = dataclasses.replace(seed, precision="tf32x3")
    (alt,) = [a for a in alternatives(seed) if a.template == "gemm_library"]
    source = render(alt).source
    assert source.count("_launch(_split)") == 1 and "_parts(tl.load(" in source
    check(sg, alt)


_LAYOUTS = {  # (fn, A's shape, B's shape): B as mm reads it, as nn.Linear's weight, A^T @ B
    "mm": (lambda x, y: (torch.mm(x, y),), (40, 64), (64, 56)),
    "linear": (lambda x, w: (torch.mm(x, w.t()),), (40, 64), (56, 64)),
    "wgrad": (lambda x, y: (torch.mm(x.t(), y),), (64, 40), (64, 56)),
}


@pytest.mark.parametrize(
    ("layout", "raw"),
    [("mm", {False: False, True: True}), ("linear", {False: True, True: True}),
     ("wgrad", {False: False, True: False})],
)  # fmt: skip
def test_under_tf32x3_both_orientations_compute_the_gemm(layout, raw):
    # A split in registers and B^T read K-major from shared memory, or the transposed product
    # (B^T in registers, A from shared memory); the shared-memory operand is read where it lies
    # as its own hi part when it is K-major (its split pass writes lo only), truncated in the
    # kernel under the interpreter (on Hopper the tensor cores truncate it)
    from kernelpro_backend.codegen.spec import RenderedKernel
    from kernelpro_backend.codegen.templates import tf32x3 as t3
    from kernelpro_backend.runtime.spec_kernel import build_kernel

    fn, a_shape, b_shape = _LAYOUTS[layout]
    sg, seed = _seed(fn, torch.randn(*a_shape), torch.randn(*b_shape))
    (alt,) = [
        a
        for a in alternatives(dataclasses.replace(seed, precision="tf32x3"))
        if a.template == "gemm_library"
    ]
    both = t3.orientations(alt)
    assert {o.swapped: o.raw for o in both} == raw
    # the cheaper split pass first: fewer rows of the shared-memory operand, or a raw one
    assert [o.pass_elements(64) for o in both] == sorted(o.pass_elements(64) for o in both)
    for o in both:
        source = t3.render_tf32x3(alt, "kernel", o)
        assert f"HI={not o.raw}" in source and ("acc = tl.trans(acc)" in source) == o.swapped
        inputs = sg.make_inputs(1)
        (got,) = build_kernel(alt, RenderedKernel("triton", source, "kernel"))(*inputs)
        (exact,) = sg.module()(*[x.double() for x in inputs])
        assert float((got.double() - exact).abs().max()) < 1e-4, (layout, o)


@pytest.mark.parametrize("layout", ["mm", "linear", "wgrad"])
def test_under_tf32x3_an_x_with_a_ragged_k_is_copied_padded_and_computes_the_gemm(layout):
    # K = 70 is not whole tiles of BLOCK_K: X's loads in the product kernel would all be
    # masked (and its rows of 70 floats off 16 bytes), so X is copied K-major with K padded
    # by a pass before the product (KernelBench L1_8's 8205x2949 @ 2949x5921)
    from kernelpro_backend.codegen.spec import RenderedKernel
    from kernelpro_backend.codegen.templates import tf32x3 as t3
    from kernelpro_backend.runtime.spec_kernel import build_kernel

    fn = _LAYOUTS[layout][0]
    shapes = {"mm": ((33, 70), (70, 20)), "linear": ((33, 70), (20, 70)),
              "wgrad": ((70, 33), (70, 20))}[layout]  # fmt: skip
    sg, seed = _seed(fn, *(torch.randn(*s) for s in shapes))
    (alt,) = [
        a
        for a in alternatives(dataclasses.replace(seed, precision="tf32x3"))
        if a.template == "gemm_library"
    ]
    both = t3.orientations(alt)
    assert all(o.x_pad for o in both)  # padded whichever operand is X
    for o in both:
        source = t3.render_tf32x3(alt, "kernel", o)
        assert "_launch(_pad)" in source and "X_FULL=True" in source
        inputs = sg.make_inputs(1)
        (got,) = build_kernel(alt, RenderedKernel("triton", source, "kernel"))(*inputs)
        (exact,) = sg.module()(*[x.double() for x in inputs])
        assert float((got.double() - exact).abs().max()) < 1e-4, (layout, o)


def test_under_tf32x3_an_aligned_x_is_read_where_it_lies():
    from kernelpro_backend.codegen.templates import tf32x3 as t3

    fn = _LAYOUTS["mm"][0]
    _, seed = _seed(fn, torch.randn(40, 64), torch.randn(64, 56))
    (alt,) = [
        a
        for a in alternatives(dataclasses.replace(seed, precision="tf32x3"))
        if a.template == "gemm_library"
    ]
    for o in t3.orientations(alt):
        assert not o.x_pad
        source = t3.render_tf32x3(alt, "kernel", o)
        assert "_launch(_pad)" not in source and "X_FULL=True" in source


def _two_outputs(x, w, r):
    y = torch.mm(x, w)
    return (y + r, torch.sigmoid(y))


@pytest.mark.parametrize(
    ("fn", "shapes"),
    [
        (lambda x, w, b: (F.gelu(F.linear(x, w, b)),), [(40, 24), (56, 24), (56,)]),
        (_addmm_relu, [(20, 12), (12, 40), (40,)]),
        (_two_outputs, [(33, 70), (70, 20), (33, 20)]),
    ],
)
def test_a_float32_gemm_with_an_epilogue_runs_under_tf32x3(fn, shapes):
    sg, seed = _seed(fn, *(torch.randn(*s) for s in shapes))
    seed = dataclasses.replace(seed, precision="tf32x3")
    (alt,) = [a for a in alternatives(seed) if a.template == "gemm_library"]
    assert knob_space(alt) == {} and "_mm3" in render(alt).source
    check(sg, alt)


def test_a_row_reduction_epilogue_gets_no_tf32x3_form():
    _, seed = _seed(
        lambda x, w: (torch.softmax(torch.mm(x, w), -1),), torch.randn(16, 8), torch.randn(8, 24)
    )
    if seed.reduced:  # the GEMM template holds the row: the library form does not
        seed = dataclasses.replace(seed, precision="tf32x3")
        assert not [a for a in alternatives(seed) if a.template == "gemm_library"]


def test_the_tf32x3_split_is_exact_in_tf32_and_keeps_22_bits():
    from kernelpro_backend.codegen.build import load_module
    from kernelpro_backend.codegen.render import RenderedKernel

    _, seed = _seed(lambda x, y: (torch.mm(x, y),), torch.randn(8, 8), torch.randn(8, 8))
    alt = dataclasses.replace(
        dataclasses.replace(seed, precision="tf32x3"), template="gemm_library", knobs=()
    )
    split = load_module(
        RenderedKernel(language="triton", source=render(alt).source, entry="_split")
    )
    x = torch.randn(64, 33) * torch.logspace(-30, 30, 33)
    x[0, :4] = torch.tensor([float("inf"), -float("inf"), float("nan"), 3.4028235e38])
    hi, lo = torch.full((40, 64), 7.0).t(), torch.full((40, 64), 7.0).t()  # K-major, as B's
    split[(1, 1)](x, 0, hi, lo, 64, 33, 64, 40, 33, 1, 1, 64, BLOCK=64)  # columns padded to 40
    assert (hi[:, 33:] == 0).all() and (lo[:, 33:] == 0).all()
    hi, lo = hi[:, :33], lo[:, :33]
    assert _tf32_parts(hi) and _tf32_parts(lo)
    finite = x.isfinite()
    assert (lo[~finite] == 0).all() and torch.equal(hi[0, :2], x[0, :2])
    assert hi[0, 3].isfinite()  # rounding up would overflow: truncated instead
    rel = ((hi.double() + lo.double() - x.double()).abs() / x.double().abs())[finite]
    assert float(rel.max()) <= 2.0**-22


def test_under_tf32x3_bias_relu_gets_the_tf32x3_form_and_other_hand_made_specs_are_refused():
    _, seed = _seed(_linear_relu, torch.randn(16, 8), torch.randn(24, 8), torch.randn(24))
    (alt,) = [
        a
        for a in alternatives(dataclasses.replace(seed, precision="tf32x3"))
        if a.template == "gemm_library"
    ]
    assert "_addmm_activation" not in render(alt).source  # cuBLASLt's would not be tf32x3
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
        self.elementwise_gemms = 0  # GEMM subgraphs without a row reduction

    def find(self, sg):
        if sg.kind != "gemm":
            return None
        self.elementwise_gemms += not lower(sg).reduced
        from kernelpro_backend.runtime.spec_kernel import build_kernel

        alts = [a for a in alternatives(lower(sg)) if a.template == "gemm_library"]
        if not alts:
            return None
        self.given += 1
        return build_kernel(alts[0])


@pytest.mark.parametrize("precision", ["auto", "tf32x3", "tf32"])
@pytest.mark.parametrize("fallback", ["inductor", "eager"])  # inlined, behind kernelpro::launch
def test_a_model_trains_through_the_library_kernel_like_eager(fallback, precision):
    """Under tf32 the reference is eager with every matrix product's operands rounded to TF32
    (the GPU's tf32 policy; the CPU's matmuls ignore it): the tf32 form rounds as it does."""
    import contextlib

    from kernelpro_backend import make_backend
    from kernelpro_backend.runtime.validate import _Tf32OnCpu

    torch.manual_seed(0)
    act = torch.nn.GELU if precision == "tf32" else torch.nn.ReLU  # not cuBLASLt's ReLU form
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), act(), torch.nn.Linear(48, 8))
    ref = torch.nn.Sequential(torch.nn.Linear(32, 48), act(), torch.nn.Linear(48, 8))
    ref.load_state_dict(model.state_dict())
    provider = _LibraryProvider()
    torch._dynamo.reset()
    compiled = torch.compile(
        model,
        backend=make_backend(provider=provider),
        options={"fallback": fallback, "precision": precision},
    )
    x = torch.randn(16, 32)
    out = compiled(x)
    out.square().sum().backward()
    with _Tf32OnCpu() if precision == "tf32" else contextlib.nullcontext():
        want = ref(x)
        want.square().sum().backward()
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    assert provider.given >= 1
    if precision != "auto":  # every GEMM of the step (forward, gradients) has the form
        assert provider.given == provider.elementwise_gemms >= 4


def test_the_library_kernel_has_nothing_to_precompile():
    """The worker precompiles Triton kernels outside the GPU lock by calling the entry with a
    compile-only launcher; a library call would run there, so it is skipped."""
    from kernelpro_backend.runtime.spec_kernel import build_kernel

    _, seed = _seed(_linear_relu, torch.randn(16, 8), torch.randn(24, 8), torch.randn(24))
    (alt,) = [a for a in alternatives(seed) if a.template == "gemm_library"]
    assert build_kernel(seed).precompiles and not build_kernel(alt).precompiles


def test_an_output_that_is_not_the_gemms_rows_in_order_gets_no_library_call():
    """A [B, T, N] output whose rows are not stored in order (transposed after the GEMM) is
    not the library's [M, N] result seen through a view."""

    def transposed(x, w, b):
        return (F.relu(F.linear(x, w, b)).transpose(0, 1).contiguous(),)

    _, seed = _seed(transposed, torch.randn(2, 8, 32), torch.randn(48, 32), torch.randn(48))
    assert not [a for a in alternatives(seed) if a.template == "gemm_library"]
