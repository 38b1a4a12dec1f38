"""A convolution group that the lowering refuses for a value at two index maps is cut like a
GEMM or reduction group (fx_passes/split.py, lowering/split.py). Conformer's convolution
module, trained: the tail of its depthwise conv1d backward (GLU's backward, written on (N, T, C))
reads the input gradient (N, C, T) transposed, and with its pointwise layers written as
nn.Conv1d(d, 2d, 1) the last one's output is read transposed by the residual add. Both groups
went whole to the fallback (`MapConflict`); cut, the convolution lowers to its template (the
depthwise backward to `conv_depthwise_backward`) and the tail to a pointwise kernel, each
matching the reference under Triton's interpreter, and a training step through those kernels
gives eager's gradients."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from gemm_training import LoweredKernels, train_like_eager
from harness import check, collect, refusal

import kernelpro_backend.rewrite.graph as rewrite
from kernelpro_backend.codegen.errors import MapConflict
from kernelpro_backend.fx_passes.ops import op_name
from kernelpro_backend.fx_passes.split import split_at
from kernelpro_backend.lowering import lower
from kernelpro_backend.lowering.split import split_refused


class ConformerConv(nn.Module):
    """LayerNorm -> pointwise (Linear, as Conformer's authors write it, or Conv1d(d, 2d, 1))
    -> GLU -> depthwise Conv1d(d, d, k, groups=d) -> BatchNorm1d -> SiLU -> pointwise ->
    residual, on x [B, T, d]."""

    def __init__(self, d: int = 8, k: int = 31, conv_pointwise: bool = True) -> None:
        super().__init__()
        self.conv_pointwise = conv_pointwise
        self.ln = nn.LayerNorm(d)
        pw = (lambda i, o: nn.Conv1d(i, o, 1)) if conv_pointwise else nn.Linear
        self.pw1, self.pw2 = pw(d, 2 * d), pw(d, d)
        self.dw = nn.Conv1d(d, d, k, padding=k // 2, groups=d)
        self.bn = nn.BatchNorm1d(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.conv_pointwise:
            h = F.glu(self.pw1(self.ln(x).transpose(1, 2)), dim=1)
            return x + self.pw2(F.silu(self.bn(self.dw(h)))).transpose(1, 2)
        h = F.glu(self.pw1(self.ln(x)), dim=-1).transpose(1, 2)
        return x + self.pw2(F.silu(self.bn(self.dw(h))).transpose(1, 2))


# T != d: a (B, T, d) tail is no mere relabelling of the (B, d, T) domain's sizes
VARIANTS = pytest.mark.parametrize("conv_pointwise", [False, True], ids=["linear", "conv1d"])


def _subgraphs(conv_pointwise: bool, split: bool, monkeypatch: pytest.MonkeyPatch) -> list:
    if not split:
        monkeypatch.setattr(rewrite, "split_refused", lambda sgs, *_: list(sgs))
    torch.manual_seed(0)
    x = torch.randn(2, 20, 8, requires_grad=True)
    found = collect(ConformerConv(conv_pointwise=conv_pointwise), [x], train=True)
    monkeypatch.undo()
    return found


def _depthwise_backward(subgraphs: list) -> list:
    return [
        sg
        for sg in subgraphs
        for n in sg.nodes
        if op_name(n) == "aten::convolution_backward" and n.args[9] == 8  # groups == d
    ]


@VARIANTS
def test_conformer_conv_groups_are_cut_and_the_depthwise_backward_lowers(
    conv_pointwise, monkeypatch
):
    cut = _subgraphs(conv_pointwise, True, monkeypatch)
    assert [sg.pattern for sg in cut if isinstance(refusal(sg), MapConflict)] == []
    (dw,) = _depthwise_backward(cut)
    spec = lower(dw)
    assert spec.template == "conv_depthwise_backward"
    assert {which for which, _ in spec.param("grads")} == {1, 2}
    # a part cut off a convolution group computes no convolution: it takes the precision of
    # its own kind (the matmul setting, IEEE by default), not cuDNN's TF32
    convs = {n for sg in cut if sg.kind == "conv" for n in sg.nodes}
    for sg in cut:
        if sg.kind == "pointwise" and any(a in convs for a in sg.inputs):
            assert sg.precision == "ieee", sg.pattern


@VARIANTS
def test_each_part_of_a_cut_convolution_group_matches_its_reference(conv_pointwise, monkeypatch):
    whole = _subgraphs(conv_pointwise, False, monkeypatch)
    refused = [sg for sg in whole if sg.kind == "conv" and isinstance(refusal(sg), MapConflict)]
    # linear: the depthwise backward and its GLU tail; conv1d: the last pointwise conv's
    # forward and the residual add reading it transposed
    assert len(refused) == 1
    (group,) = refused
    parts = split_refused([group])
    assert [p.kind for p in parts] == ["conv", "pointwise"]
    assert sorted(n.name for p in parts for n in p.nodes) == sorted(n.name for n in group.nodes)
    for seed, part in enumerate(parts):
        check(part, seed=seed)


def test_every_pick_of_the_backward_tuple_stays_with_the_backward(monkeypatch):
    # the cut is below the input gradient's transpose; the weight and bias gradients depend on
    # no part of it, yet a part of their own would read the backward's tuple
    whole = _subgraphs(False, False, monkeypatch)
    (group,) = _depthwise_backward(whole)
    error = refusal(group)
    assert isinstance(error, MapConflict)
    first, rest = split_at(group, error.cut)
    backward = next(n for n in first.nodes if op_name(n) == "aten::convolution_backward")
    assert set(backward.users) <= set(first.nodes)
    assert all(n.args[0] is not backward for n in rest.nodes)


def _reads_convolution(sg) -> bool:
    """Whether `sg` reads a convolution's output or a gradient its backward picks."""
    conv = ("aten::convolution", "aten::convolution_backward")
    return any(
        op_name(i) in conv or (i.target is operator.getitem and op_name(i.args[0]) in conv)
        for i in sg.inputs
    )


def ConvKernels() -> LoweredKernels:  # noqa: N802 (reads as the provider it makes)
    """Every convolution subgraph, and every other one that reads a convolution's result, on
    its lowered default kernel."""
    return LoweredKernels(lambda sg: sg.kind == "conv" or _reads_convolution(sg))


@VARIANTS
def test_a_training_step_through_the_parts_kernels_gives_eagers_gradients(
    conv_pointwise, monkeypatch
):
    # the dense pointwise convolutions in IEEE float32, as eager computes them on the CPU
    # (under cuDNN's default TF32 policy their kernels round operands to 10 mantissa bits)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    provider = ConvKernels()
    x = torch.randn(2, 20, 8)
    train_like_eager(lambda: ConformerConv(conv_pointwise=conv_pointwise), x, provider, "eager")
    assert provider.refused == []
    backwards = [p for p in provider.patterns if p.startswith("backward convolution_backward")]
    assert len(backwards) == 1 + 2 * conv_pointwise
