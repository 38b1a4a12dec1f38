"""The CUTLASS GEMM as a template ("gemm_cutlass"): which GEMM specs it computes, its knobs, the
module that calls its library (run here with a stand-in for the library: the operand views,
bias and residual wiring checked against the subgraph on the CPU)."""

from __future__ import annotations

import ast
import dataclasses

import pytest
import torch
import torch.nn.functional as F
from harness import collect, traced_subgraph

from kernelpro_backend.cache.artifact import KernelArtifact
from kernelpro_backend.codegen import IllegalSpec, alternatives, knob_space, render
from kernelpro_backend.codegen.build import SpecKernel
from kernelpro_backend.codegen.cutlass_match import (
    EXTRA_HOST_US,
    cutlass_gemm,
    cutlass_problem,
    cutlass_specs,
)
from kernelpro_backend.lowering import lower
from kernelpro_backend.ops import cutlass_gemm as cutlass_op
from kernelpro_backend.rewrite.inline import trace_kernel
from kernelpro_backend.tuner.artifacts import surcharge_ms

M, K, N = 48, 32, 64


def _seed(fn, *, dtype=torch.bfloat16, k=K, residual=False, bias=True):  # type: ignore[no-untyped-def]
    x = torch.randn(M, k, dtype=dtype)
    w = torch.randn(N, k, dtype=dtype).t()  # a Linear's weight as stored, transposed
    b = torch.randn(N, dtype=dtype)
    r = torch.randn(M, N, dtype=dtype)
    args = ((b,) if bias else ()) + (x, w) + ((r,) if residual else ())
    sg = traced_subgraph(fn, args, "gemm")
    return lower(sg), sg


def _leaky(y: torch.Tensor) -> torch.Tensor:
    return torch.where(y > 0, y, y * 0.1)  # a comparison: not evaluated, not compiled


def _swish2(y: torch.Tensor) -> torch.Tensor:
    return y * torch.sigmoid(y) * 2.0


CASES = {
    "gelu": (lambda b, a, c: (F.gelu(torch.addmm(b, a, c)),), "gelu", True, False),
    "silu": (lambda b, a, c: (F.silu(torch.addmm(b, a, c)),), "silu", True, False),
    "relu": (lambda b, a, c: (F.relu(torch.addmm(b, a, c)),), "relu", True, False),
    "sigmoid": (lambda b, a, c: (torch.sigmoid(torch.addmm(b, a, c)),), "sigmoid", True, False),
    "bias": (lambda b, a, c: (torch.addmm(b, a, c),), "identity", True, False),
    "residual": (lambda b, a, c, r: (torch.addmm(b, a, c) + r,), "identity", True, True),
    "mm": (lambda a, c: (torch.mm(a, c),), "identity", False, False),
    "mm_gelu": (lambda a, c: (F.gelu(torch.mm(a, c)),), "gelu", False, False),
    "swish_scale": (  # KernelBench L2_59's epilogue: the ops compiled into a CUTLASS functor
        lambda b, a, c: (_swish2(torch.addmm(b, a, c)),),
        "custom",
        True,
        False,
    ),
    "gelu_tanh": (
        lambda b, a, c: (F.gelu(torch.addmm(b, a, c), approximate="tanh"),),
        "gelu_tanh",
        True,
        False,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_epilogues_it_computes(case: str) -> None:
    fn, act, bias, residual = CASES[case]
    seed, _ = _seed(fn, residual=residual, bias=bias)
    assert cutlass_problem(seed) is None
    specs = cutlass_specs(seed)
    assert len(specs) == 8 and len(set(specs)) == 8  # 12 combinations, less 4 not built
    assert dict(specs[0].knobs) == {"CLUSTER_M": 1, "SCHEDULE": "pingpong", "TILE_N": 128}
    config = cutlass_gemm(specs[0])
    assert (config.activation, config.bias, config.source) == (act, bias, residual)
    assert config.tile == (128, 128, 64) and config.schedule == "pingpong"
    assert specs[0] in alternatives(seed)  # the search measures it beside the seed
    assert knob_space(specs[0]) == {  # each knob's values legal with the others as they are
        "SCHEDULE": ("pingpong", "cooperative", "stream_k"),
        "TILE_N": (128,),  # ping-pong x 256 spills: illegal
        "CLUSTER_M": (1, 2),
    }
    with pytest.raises(IllegalSpec, match="spills"):
        specs[0].with_knobs(TILE_N=256)
    big = cutlass_gemm(specs[0].with_knobs(SCHEDULE="cooperative", TILE_N=256, CLUSTER_M=2))
    assert big.tile == (128, 256, 64) and big.cluster == (2, 1) and big.schedule == "cooperative"
    streamed = cutlass_gemm(specs[0].with_knobs(SCHEDULE="stream_k", TILE_N=256))
    assert streamed.schedule == "stream_k" and streamed.cluster == (1, 1)
    with pytest.raises(IllegalSpec, match="stream-K"):
        specs[0].with_knobs(SCHEDULE="stream_k", CLUSTER_M=2)


@pytest.mark.parametrize(
    "fn, kwargs, why",
    [
        (lambda b, a, c: (F.leaky_relu(torch.addmm(b, a, c), 0.1),), {}, "elementwise ops"),
        (lambda b, a, c: (_leaky(torch.addmm(b, a, c)),), {}, "elementwise ops"),
        (lambda b, a, c, r: (F.gelu(torch.addmm(b, a, c)) + r,), {"residual": True}, "before"),
        (lambda b, a, c, r: (torch.addmm(b, a, c) + r + 1.0,), {"residual": True}, "after"),
        (lambda b, a, c: (torch.addmm(b, a, c),), {"dtype": torch.float32}, "float32"),
        (lambda b, a, c: (torch.addmm(b, a, c),), {"k": 36}, "multiples of 8"),
    ],
)
def test_what_it_refuses(fn, kwargs, why: str) -> None:  # type: ignore[no-untyped-def]
    seed, _ = _seed(fn, **kwargs)
    problem = cutlass_problem(seed)
    assert problem is not None and why in problem
    assert cutlass_specs(seed) == []
    assert all(a.template != "gemm_cutlass" for a in alternatives(seed))
    knobs = (("CLUSTER_M", 1), ("SCHEDULE", "pingpong"), ("TILE_N", 128))
    with pytest.raises(IllegalSpec, match="gemm_cutlass cannot compute"):
        dataclasses.replace(seed, template="gemm_cutlass", knobs=knobs)


class _Library:
    """Stands in for the built library: computes what the kernel computes, in float32."""

    def __init__(self, act: str, bias: bool, source_term: bool) -> None:
        self.act, self.bias, self.source_term = act, bias, source_term
        self.calls = 0

    def __call__(self, a, b, bias, c, out):  # type: ignore[no-untyped-def]
        assert (bias is not None) == self.bias and (c is not None) == self.source_term
        assert 1 in a.stride() and 1 in b.stride() and out.stride(-1) == 1
        y = a.float() @ b.float().t()
        y = y + bias.float() if bias is not None else y
        y = y + c.float() if c is not None else y
        fns = {"identity": lambda v: v, "gelu": F.gelu, "relu": F.relu, "silu": F.silu}
        fns["custom"] = _swish2
        out.copy_(fns.get(self.act, torch.sigmoid)(y))
        self.calls += 1
        return out


@pytest.mark.parametrize("case", ["gelu", "residual", "mm", "swish_scale"])
def test_module_wires_operands_to_the_library(case: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    fn, act, bias, residual = CASES[case]
    seed, sg = _seed(fn, residual=residual, bias=bias)
    spec = cutlass_specs(seed)[3]
    rendered = render(spec)
    ast.parse(rendered.source)
    assert "KernelTmaWarpSpecialized" in rendered.source and "kp_gemm_run" in rendered.source
    kernel = SpecKernel(spec, rendered)
    assert not kernel.precompiles  # a library call: nothing to precompile
    library = _Library(act, bias, residual)
    monkeypatch.setattr(cutlass_op, "library_gemm", lambda source, **kw: library)
    inputs = sg.make_inputs(0, "cpu")
    (got,) = kernel(*inputs)
    (want,) = sg.module()(*inputs)
    assert library.calls == 1 and got.shape == want.shape and got.stride() == want.stride()
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)


def test_the_module_traces_into_one_op_node(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Inlined like a Triton kernel: operand views and one kernelpro::cutlass_gemm node."""
    fn, *_ = CASES["residual"]
    seed, sg = _seed(fn, residual=True)
    kernel = SpecKernel(cutlass_specs(seed)[0])
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # no Triton launch to interpret
    traced = trace_kernel(kernel, sg)
    targets = [str(n.target) for n in traced.graph.nodes if n.op == "call_function"]
    assert targets.count("kernelpro.cutlass_gemm.default") == 1, targets
    assert set(targets) <= {"kernelpro.cutlass_gemm.default", "aten.as_strided.default"}


def test_an_unregistered_source_is_an_error() -> None:
    a, b = torch.zeros(8, 8, dtype=torch.bfloat16), torch.zeros(8, 8, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="no CUTLASS source"):
        torch.ops.kernelpro.cutlass_gemm(a, b, None, None, "0" * 32)


class _Linear(torch.nn.Module):
    def __init__(self, act) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.linear, self.act = torch.nn.Linear(K, N), act

    def forward(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return self.act(self.linear(x), r)


@pytest.mark.parametrize(
    "act, name",
    [
        (lambda y, r: F.gelu(y), "gelu"),
        (lambda y, r: F.gelu(y, approximate="tanh"), "gelu_tanh"),
        (lambda y, r: F.silu(y), "silu"),
        (lambda y, r: torch.sigmoid(y), "sigmoid"),
        (lambda y, r: torch.relu(y), "relu"),
        (lambda y, r: y + r, "identity"),
        (lambda y, r: _swish2(y), "custom"),  # KernelBench L2_59
        (lambda y, r: torch.relu((y - 2.0) * 1.5), "custom"),  # KernelBench L2_9
    ],
)
def test_decomposed_epilogues_of_a_real_graph(act, name: str) -> None:  # type: ignore[no-untyped-def]
    """Through the backend's partitioner (Inductor's decompositions: GELU arrives as a cast,
    a scale, erf, + 1, a product and a cast back): the activation is recognised by value."""
    model = _Linear(act).bfloat16()
    x, r = torch.randn(M, K, dtype=torch.bfloat16), torch.randn(M, N, dtype=torch.bfloat16)
    (sg,) = [s for s in collect(model, (x, r), train=False) if s.kind == "gemm"]
    seed = lower(sg)
    assert len(seed.ops) > 2 or name in ("identity", "relu", "sigmoid", "custom")
    assert cutlass_problem(seed) is None, seed.ops
    config = cutlass_gemm(cutlass_specs(seed)[0])
    assert config.activation == name and config.bias and config.source == (name == "identity")
    assert bool(config.activation_body) == (name == "custom")
    assert ("KpAct" in config.source_text()) == (name == "custom")


def _artifacts() -> tuple[KernelArtifact, KernelArtifact]:
    """A bias + GELU GEMM's entry as the CUTLASS kernel, and as the Triton seed."""
    fn, *_ = CASES["gelu"]
    seed, _ = _seed(fn)
    spec = cutlass_specs(seed)[0]
    rendered = render(spec)
    made = KernelArtifact(rendered.language, rendered.source, rendered.entry, spec.to_json())
    return made, KernelArtifact("triton", render(seed).source, "entry", seed.to_json())


def test_listings_name_a_cutlass_entry_as_such() -> None:
    made, seed_made = _artifacts()
    assert made.language == "triton" and made.shown_language == "cutlass"
    assert seed_made.shown_language == "triton"
    assert (made.template, seed_made.template) == ("gemm_cutlass", "gemm")
    assert dataclasses.replace(made, spec_json="{not json").template is None


def test_a_cached_short_cutlass_kernel_must_pay_its_host_path() -> None:
    made, triton = _artifacts()
    assert surcharge_ms(dataclasses.replace(made, kernel_ms=0.020)) == EXTRA_HOST_US / 1e3
    assert surcharge_ms(dataclasses.replace(made, kernel_ms=0.140)) == 0.0
    assert surcharge_ms(dataclasses.replace(triton, kernel_ms=0.020)) == 0.0


def _backward_seeds() -> dict[str, tuple]:
    """The three GEMMs of a Linear's step as the backward graph holds them: y = x @ W^T,
    dx = dy @ W (W [N, K] stored: B with N contiguous), dW = dy^T @ x (A with M contiguous)."""
    x, w = torch.randn(M, K, dtype=torch.bfloat16), torch.randn(N, K, dtype=torch.bfloat16)
    dy = torch.randn(M, N, dtype=torch.bfloat16)
    out = {}
    for name, args in {"y": (x, w.t()), "dx": (dy, w), "dw": (dy.t(), x)}.items():
        sg = traced_subgraph(lambda a, b: (torch.mm(a, b),), args, "gemm")
        out[name] = (lower(sg), sg)
    return out


def test_the_backward_gemms_with_transposed_operands_run_on_cutlass(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """dx = dy @ W reads B with N contiguous and dW = dy^T @ x reads A with M contiguous: the
    kernel is built with those layouts (CUTLASS's RowMajor B / ColumnMajor A; kp_gemm_layout
    says which), and the module passes views with those strides."""
    majors = {"y": ("k", "k"), "dx": ("k", "n"), "dw": ("m", "n")}
    for name, (seed, sg) in _backward_seeds().items():
        assert cutlass_problem(seed) is None, name
        config = cutlass_gemm(cutlass_specs(seed)[0])
        assert (config.a_major, config.b_major) == majors[name]
        source = config.source_text()
        code = (config.a_major == "m") + 2 * (config.b_major == "n")
        assert f"int kp_gemm_layout() {{ return {code}; }}" in source
        if name == "dw":
            assert "LayoutA = cutlass::layout::ColumnMajor;" in source
            assert "make_stride(Int<1>{}, lda, int64_t(0))" in source
        if name != "y":
            assert "LayoutB = cutlass::layout::RowMajor;" in source
            assert "make_stride(Int<1>{}, ldb, int64_t(0))" in source
        library = _Library("identity", False, False)
        monkeypatch.setattr(cutlass_op, "library_gemm", lambda source, lib=library, **kw: lib)
        inputs = sg.make_inputs(0, "cpu")
        (got,) = SpecKernel(cutlass_specs(seed)[0])(*inputs)
        (want,) = sg.module()(*inputs)
        assert library.calls == 1
        torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("lead", [(2, 24), (), (1,)], ids=["batch-seq", "vector", "one-row"])
@pytest.mark.parametrize("residual", [False, True], ids=["gelu", "residual"])
def test_a_linear_on_activations_of_any_rank_runs_as_cutlass(lead, residual, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A transformer's Linear sees [B, T, d] activations: the graph views them as the [B * T, d]
    GEMM and its [B * T, N] result as [B, T, N] (the residual too). That output is the
    kernel's, viewed; a vector input is the GEMM of one row."""
    act = (lambda y, r: y + r) if residual else (lambda y, r: F.gelu(y))
    model = _Linear(act).bfloat16()
    x = torch.randn(*lead, K, dtype=torch.bfloat16)
    r = torch.randn(*lead, N, dtype=torch.bfloat16)
    (sg,) = [s for s in collect(model, (x, r), train=False) if s.kind == "gemm"]
    seed = lower(sg)
    assert tuple(seed.outputs[0][0]) == (*lead, N)
    assert cutlass_problem(seed) is None, cutlass_problem(seed)
    spec = cutlass_specs(seed)[0]
    config = cutlass_gemm(spec)
    assert config.activation == ("identity" if residual else "gelu") and config.source == residual
    library = _Library(config.activation, True, residual)
    monkeypatch.setattr(cutlass_op, "library_gemm", lambda source, **kw: library)
    kernel = SpecKernel(spec, render(spec))
    inputs = sg.make_inputs(0, "cpu")
    (got,) = kernel(*inputs)
    (want,) = sg.module()(*inputs)
    assert library.calls == 1
    assert got.shape == want.shape and got.stride() == want.stride()
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)


def test_an_output_that_is_not_the_gemms_rows_in_order_is_refused() -> None:
    model = _Linear(lambda y, r: F.gelu(y).transpose(0, 1).contiguous()).bfloat16()
    x = torch.randn(2, 24, K, dtype=torch.bfloat16)
    (sg,) = [s for s in collect(model, (x, x), train=False) if s.kind == "gemm"]
    problem = cutlass_problem(lower(sg))
    assert problem is not None and "row after row" in problem
