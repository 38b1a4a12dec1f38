"""Which convolutions CUTLASS's Hopper conv computes ("conv_cutlass"): a dense channels-last
forward in bf16, or float32 under TF32, with 16-byte channel rows and nothing else in the
subgraph, is offered beside the Triton conv (its knobs legal, its module rendered around the
CUDA C++ source and `kernelpro::cutlass_conv`, whose fake gives a channels-last output); NCHW
operands, IEEE float32, groups, an epilogue and unaligned channels are refused with their
reason; the background builder queues each configuration's library. A conv backward runs as
dgrad and wgrad (each where its gradient is asked for), refused strided or in float32 where
CUTLASS's Hopper kernels do not cover it."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from harness import decomposed_subgraph
from helpers import subgraphs_of
from test_cutlass_builds import RecordingBuilds, _builds, _FakeNvcc

from kernelpro_backend.codegen import IllegalSpec
from kernelpro_backend.codegen.cutlass_conv_match import (
    DEFAULT,
    SPACE,
    conv_cutlass_problem,
    conv_cutlass_specs,
    cutlass_conv,
    cutlass_convs,
)
from kernelpro_backend.codegen.defaults import alternatives
from kernelpro_backend.codegen.render import render
from kernelpro_backend.lowering import lower

CL = torch.channels_last


def conv_spec(dtype=torch.bfloat16, c=64, k=128, layout=CL, groups=1, epilogue=False, tf32=True):  # type: ignore[no-untyped-def]
    x = torch.randn(2, c, 16, 16, dtype=dtype).contiguous(memory_format=layout)
    w = torch.randn(k, c // groups, 3, 3, dtype=dtype).contiguous(memory_format=layout)

    def fn(x, w):  # type: ignore[no-untyped-def]
        y = F.conv2d(x, w, padding=1, groups=groups)
        return F.relu(y) if epilogue else y

    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = tf32
    try:
        return lower(decomposed_subgraph(fn, x, w))
    finally:
        torch.backends.cudnn.allow_tf32 = before


def test_a_channels_last_conv_is_offered_as_cutlass_and_renders() -> None:
    seed = conv_spec()
    assert seed.template == "conv" and conv_cutlass_problem(seed) is None
    offered = [a for a in alternatives(seed) if a.template == "conv_cutlass"]
    assert len(offered) == 1 and dict(offered[0].knobs) == {"CLUSTER_M": 1, "TILE_N": 128}
    specs = conv_cutlass_specs(seed)
    assert len(specs) == len(SPACE["TILE_N"]) * len(SPACE["CLUSTER_M"])
    assert cutlass_conv(specs[-1]).tile[1] == 256 and cutlass_conv(specs[0]).operator == "fprop"
    moved = offered[0].with_knobs(TILE_N=64)  # a legal move of the search
    assert cutlass_conv(moved).tile == (128, 64, 64)
    rendered = render(offered[0])
    assert "torch.ops.kernelpro.cutlass_conv" in rendered.source
    assert "cutlass::conv::Operator::kFprop" in rendered.source
    assert "PROBLEM = [2, 16, 16, 64, 128, 3, 3, 1, 1, 1, 1, 1, 1]" in rendered.source
    module: dict = {}
    exec(compile(rendered.source, "conv_cutlass_module", "exec"), module)  # noqa: S102
    from kernelpro_backend.ops.cutlass_gemm import _SOURCES

    assert _SOURCES[module["DIGEST_0"]] == cutlass_conv(offered[0]).source_text()


def test_float32_goes_as_tf32_only_where_pytorch_allows_it() -> None:
    spec = conv_spec(torch.float32)
    assert spec.precision == "tf32" and conv_cutlass_problem(spec) is None
    assert cutlass_conv(conv_cutlass_specs(spec)[0]).tile == (128, 128, 32)
    ieee = conv_spec(torch.float32, tf32=False)
    assert "TF32" in str(conv_cutlass_problem(ieee)) and conv_cutlass_specs(ieee) == []


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (dict(layout=torch.contiguous_format), "channels-last"),
        (dict(groups=2), "grouped"),
        (dict(epilogue=True), "more than the convolution"),
        (dict(c=12), "multiples of 8"),
    ],
)
def test_refused_with_the_reason(change: dict, words: str) -> None:
    seed = conv_spec(**change)
    assert words in str(conv_cutlass_problem(seed))
    assert not any(a.template == "conv_cutlass" for a in alternatives(seed))
    with pytest.raises(IllegalSpec, match="conv_cutlass cannot compute"):
        dataclasses.replace(seed, template="conv_cutlass", knobs=DEFAULT)


def test_the_ops_fake_gives_a_channels_last_output() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    import kernelpro_backend.ops.cutlass_conv  # noqa: F401  (registers the op)

    with FakeTensorMode():
        x = torch.empty(2, 64, 16, 16, dtype=torch.bfloat16).contiguous(memory_format=CL)
        w = torch.empty(128, 64, 3, 3, dtype=torch.bfloat16).contiguous(memory_format=CL)
        problem = [2, 16, 16, 64, 128, 3, 3, 1, 1, 2, 2, 1, 1]
        y = torch.ops.kernelpro.cutlass_conv(x, w, problem, "d", "fprop")
        dy = torch.empty(2, 128, 8, 8, dtype=torch.bfloat16).contiguous(memory_format=CL)
        dx = torch.ops.kernelpro.cutlass_conv(dy, w, problem, "d", "dgrad")
        dw = torch.ops.kernelpro.cutlass_conv(dy, x, problem, "d", "wgrad")
    assert y.shape == (2, 128, 8, 8) and y.is_contiguous(memory_format=CL)
    assert dx.shape == x.shape and dw.shape == w.shape


def test_each_configuration_is_queued_for_a_build() -> None:
    nvcc = _FakeNvcc()
    builds = _builds(nvcc)
    seed = conv_spec()
    specs = conv_cutlass_specs(seed)
    assert builds.start(seed) == len(specs)
    assert builds.wait(10) and all(builds.ready(s) for s in specs)
    assert sorted(nvcc.calls) == sorted(cutlass_conv(s).source_text() for s in specs)


def backward_spec(dtype=torch.bfloat16, stride=1, input_grad=True):  # type: ignore[no-untyped-def]
    """The conv backward of a channels-last Conv2d (no bias) trained one step: the input and
    weight gradients, or (the first layer's) the weight's alone."""
    conv = torch.nn.Conv2d(64, 128, 3, stride=stride, padding=1, bias=False).to(dtype)
    conv = conv.to(memory_format=CL)
    x = torch.randn(2, 64, 16, 16, dtype=dtype).contiguous(memory_format=CL)
    x.requires_grad_(input_grad)
    (sg,) = [s for s in subgraphs_of(conv, x) if s.pattern == "convolution_backward"]
    return lower(sg)


def test_a_conv_backward_runs_as_dgrad_and_wgrad() -> None:
    seed = backward_spec()
    assert seed.template == "conv_backward" and conv_cutlass_problem(seed) is None
    (offered,) = [a for a in alternatives(seed) if a.template == "conv_cutlass"]
    assert [c.operator for c in cutlass_convs(offered)] == ["dgrad", "wgrad"]
    source = render(offered).source
    assert source.count("torch.ops.kernelpro.cutlass_conv(") == 2
    assert "'dgrad'" in source and "'wgrad'" in source
    weight_only = backward_spec(input_grad=False)
    assert [c.operator for c in cutlass_convs(conv_cutlass_specs(weight_only)[0])] == ["wgrad"]
    nvcc = _FakeNvcc()
    builds = _builds(nvcc)
    assert builds.start(seed) == 2 * len(conv_cutlass_specs(seed))  # a dgrad and a wgrad each
    assert builds.wait(10) and builds.ready(offered)


@pytest.mark.parametrize(
    ("change", "words"),
    [(dict(stride=2), "strided input gradient"), (dict(dtype=torch.float32), "float32 weight")],
)
def test_a_backward_cutlass_cannot_compute_is_refused(change: dict, words: str) -> None:
    assert words in str(conv_cutlass_problem(backward_spec(**change)))


def test_a_convs_search_queues_and_waits_for_its_libraries() -> None:
    """As for a GEMM: the searcher queues a CUDA convolution's CUTLASS builds when its graph is
    known, and a search of it waits (two budgets at most) for those in flight."""
    from kernelpro_backend.options import Options
    from kernelpro_backend.tuner.searcher import SubgraphSearcher

    x = torch.randn(2, 64, 16, 16, dtype=torch.bfloat16).contiguous(memory_format=CL)
    w = torch.randn(128, 64, 3, 3, dtype=torch.bfloat16).contiguous(memory_format=CL)
    sg = decomposed_subgraph(lambda x, w: F.conv2d(x, w, padding=1), x, w)
    sg = dataclasses.replace(sg, device=torch.device("cuda"))
    searcher = SubgraphSearcher(Options(search="on-miss", progress=False))
    calls: list = []
    searcher.cutlass = RecordingBuilds(calls)  # type: ignore[assignment]
    searcher.queue_builds([sg])
    searcher._await_builds(sg, 30.0)
    assert calls == [("start", "conv"), ("start", "conv"), ("wait", 60.0)]


class _FakeLibrary:
    """library_conv's stand-in on the CPU: each operator as PyTorch computes it."""

    def __init__(self, operator: str) -> None:
        self.operator = operator

    def __call__(self, act, flt, problem):  # type: ignore[no-untyped-def]
        pad, stride = problem.padding, problem.stride
        if self.operator == "fprop":
            out = F.conv2d(act, flt, padding=pad, stride=stride)
        else:
            dy, other = act, flt
            x_like = torch.empty(problem.n, problem.c, problem.h, problem.w, dtype=dy.dtype)
            w_like = torch.empty(problem.k, problem.c, problem.r, problem.s, dtype=dy.dtype)
            x, w = (x_like, other) if self.operator == "dgrad" else (other, w_like)
            grads = torch.ops.aten.convolution_backward(
                dy, x, w, None, stride, pad, (1, 1), False, (0, 0), 1,
                (self.operator == "dgrad", self.operator == "wgrad", False),
            )  # fmt: skip
            out = grads[0] if self.operator == "dgrad" else grads[1]
        return out.contiguous(memory_format=CL)


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_the_module_passes_each_operator_its_operands(backward: bool, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The rendered module run on the CPU with PyTorch standing in for the libraries: each
    result equals the subgraph's, so the operands, operators and outputs are in their places;
    traced, it is one kernelpro::cutlass_conv node a result."""
    from kernelpro_backend.codegen.build import SpecKernel
    from kernelpro_backend.ops import cutlass_conv as op
    from kernelpro_backend.rewrite.inline import trace_kernel

    monkeypatch.setattr(op, "library_conv", lambda source, operator: _FakeLibrary(operator))
    dtype = torch.bfloat16 if backward else torch.float32  # a float32 wgrad is refused
    conv = torch.nn.Conv2d(64, 128, 3, padding=1, bias=False).to(dtype, memory_format=CL)
    x = torch.randn(2, 64, 16, 16, dtype=dtype).contiguous(memory_format=CL).requires_grad_()
    pattern = "convolution_backward" if backward else "convolution"
    (sg,) = [s for s in subgraphs_of(conv, x) if s.pattern == pattern]
    spec = conv_cutlass_specs(lower(sg))[0]
    kernel = SpecKernel(spec)
    inputs = sg.make_inputs(0, "cpu")
    got, want = kernel(*inputs), sg.module()(*inputs)
    assert len(got) == len(want) == (2 if backward else 1)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.is_contiguous(memory_format=CL)
        torch.testing.assert_close(g.float(), w.float(), rtol=2e-2, atol=2e-2)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # no Triton launch to interpret
    traced = trace_kernel(kernel, sg)
    targets = [str(n.target) for n in traced.graph.nodes if n.op == "call_function"]
    assert targets == ["kernelpro.cutlass_conv.default"] * len(want), targets
