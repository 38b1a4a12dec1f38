"""The convolution backward template ("conv_backward": dgrad and wgrad as implicit GEMMs, the
bias gradient summed beside wgrad, split-K partials combined in order) under Triton's
interpreter against the aten.convolution_backward autograd runs, with the tail AOTAutograd
fuses onto the input gradient (a residual's gradient added, ReLU's mask): stride 2, padding,
dilation 2, groups 2, 13x11 images, NCHW and channels-last, float32 and bfloat16."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from harness import check, collect

from kernelpro_backend.codegen import render
from kernelpro_backend.codegen.errors import IllegalSpec
from kernelpro_backend.lowering import lower
from kernelpro_backend.runtime.spec_kernel import build_kernel


class _Block(nn.Module):
    def __init__(self, bias: bool = True) -> None:
        super().__init__()
        self.a = nn.Conv2d(4, 6, 3, padding=1, stride=2, bias=bias)
        self.b = nn.Conv2d(6, 6, 3, padding=2, dilation=2, groups=2, bias=bias)

    def forward(self, x):  # type: ignore[no-untyped-def]
        y = F.relu(self.a(x))
        return F.relu(self.b(y)) + y


def _backward_subgraphs(model, x):  # type: ignore[no-untyped-def]
    found = [s for s in collect(model, [x]) if s.kind == "conv" and s.graph == "backward"]
    assert found
    return found


@pytest.fixture(autouse=True)
def _ieee_convolutions(monkeypatch: pytest.MonkeyPatch) -> None:
    """IEEE float32 convolutions (the tf32 rounding is the forward's test)."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_dgrad_wgrad_and_bias_grad_match_autograd(channels_last: bool) -> None:
    model, x = _Block(), torch.randn(2, 4, 13, 11, requires_grad=True)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.detach().to(memory_format=torch.channels_last).requires_grad_()
    sgs = _backward_subgraphs(model, x)
    assert any(len(s.ops) > 1 for s in sgs)  # the input gradient's tail rides along
    for seed, sg in enumerate(sgs):
        spec = lower(sg)
        assert spec.template == "conv_backward" and {w for w, _ in spec.param("grads")} == {1, 2}
        check(sg, spec, seed=seed)
        split = 2 if spec.knob("SPLIT_K") == 1 else 1
        check(sg, spec.with_knobs(SPLIT_K=split, WG_BLOCK_K=16, BLOCK_K=16), seed=seed)


def test_weight_gradient_alone_without_bias_over_several_splits() -> None:
    """The first layer (its input needs no gradient) of a bias-free block: wgrad alone, its
    70 output pixels split four ways, 16 a step (the last step masked)."""
    model = _Block(bias=False)
    sgs = _backward_subgraphs(model, torch.randn(2, 4, 13, 11))
    (first,) = [s for s in sgs if len(s.outputs) == 1]
    spec = lower(first)
    assert spec.param("grads") == ((1, 0),)
    check(first, spec.with_knobs(SPLIT_K=4, WG_BLOCK_K=16))


def test_bfloat16_backward_accumulates_in_float32() -> None:
    model = _Block().to(torch.bfloat16)
    x = torch.randn(2, 4, 13, 11, dtype=torch.bfloat16, requires_grad=True)
    for sg in _backward_subgraphs(model, x):
        check(sg, lower(sg))


def test_conv1d_backward() -> None:
    """(A depthwise backward is templates/conv_dw_bwd.py's: test_conv_dw_bwd.py.)"""
    conv = nn.Conv1d(6, 4, 5, stride=2, padding=2, groups=2)
    (sg,) = _backward_subgraphs(conv, torch.randn(2, 6, 17, requires_grad=True))
    check(sg, lower(sg))
    check(sg, lower(sg).with_knobs(PACK_X=1).with_precision("tf32"))


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_repacked_or_strided_weight_and_tf32_backward(channels_last: bool) -> None:
    """dgrad with its B from the repacked weight (rounded there under tf32) and through the
    weight's strides; wgrad's one-tap programs over channel tiles narrower than the group
    (16 of 20) with the pixel tail masked, split and not, its B from the input's dense NCHW
    copy (rounded there under tf32) and through the input's strides, at both precisions."""
    model = nn.Conv2d(40, 24, 3, padding=1, stride=2, groups=2)
    x = torch.randn(2, 40, 13, 11, requires_grad=True)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.detach().to(memory_format=torch.channels_last).requires_grad_()
    (sg,) = _backward_subgraphs(model, x)
    for precision in ("ieee", "tf32"):
        for pack, split in ((0, 1), (1, 4)):
            spec = lower(sg).with_precision(precision)
            knobs = dict(PACK_W=pack, PACK_X=pack, SPLIT_K=split, BLOCK_M=16, BLOCK_N=16)
            knobs.update(BLOCK_K=16, WG_BLOCK_M=16, WG_BLOCK_N=16, WG_BLOCK_K=16)
            check(sg, spec.with_knobs(**knobs))


def test_tf32_dgrad_weight_repack_is_k_major() -> None:
    """dgrad's B under tf32 (the TF32 wgmma reads shared memory K-major only): the repacked
    weight's tile is contiguous along K, the 12 output channels of a group; IEEE keeps it
    contiguous along N, the 20 input channels."""
    x = torch.randn(2, 40, 9, 7, requires_grad=True)
    (sg,) = _backward_subgraphs(nn.Conv2d(40, 24, 3, padding=1, groups=2), x)
    spec = lower(sg).with_knobs(PACK_W=1)
    tf32 = render(spec.with_precision("tf32")).source
    assert "w_cols = wp + g * 2160 + rn * 12" in tf32
    assert "b = tl.load(w_cols + tap * 240 + co[:, None]," in tf32
    ieee = render(spec.with_precision("ieee")).source
    assert "b = tl.load(w_cols + (tap * 12 + co[:, None]) * 20," in ieee


def test_tf32_wgrad_copies_its_input_rounded_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under tf32 the weight gradient reads B from the input's rounded dense copy (PACK_X=1:
    no rounding of B in its main loop); IEEE reads the input where it lies; PACK_X=1 without a
    weight gradient is refused."""
    x, conv = torch.randn(2, 8, 9, 7, requires_grad=True), nn.Conv2d(8, 16, 3, padding=1)
    (ieee,) = _backward_subgraphs(conv, x)
    assert lower(ieee).precision == "ieee" and lower(ieee).knob("PACK_X") == 0
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    (sg,) = _backward_subgraphs(conv, x)
    spec = lower(sg)
    assert spec.precision == "tf32" and spec.knob("PACK_X") == 1
    source = render(spec).source
    wgrad = source[source.index("def wgrad(") :].split("\n\n\n")[0]
    assert "def pack_x(" in source and "x_cols = xr + " in wgrad
    assert wgrad.count("cvt.rna.tf32.f32") == 1  # A only
    dx_only = _backward_subgraphs(nn.Conv2d(8, 16, 3, padding=1).requires_grad_(False), x)[0]
    with pytest.raises(IllegalSpec, match="PACK_X=1"):
        lower(dx_only).with_knobs(PACK_X=1)


class _Autocast(nn.Module):
    """A convolution as bfloat16 autocast runs it: float32 input and parameters cast to
    bfloat16, so AOTAutograd casts the weight's and bias's bfloat16 gradients to float32."""

    def __init__(self, c_in: int, c_out: int, k: int, stride: int, groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, stride=stride, padding=k // 2, groups=groups)

    def forward(self, x):  # type: ignore[no-untyped-def]
        w, b = self.conv.weight.bfloat16(), self.conv.bias.bfloat16()
        c = self.conv
        y = F.conv2d(x.bfloat16(), w, b, c.stride, c.padding, c.dilation, c.groups)
        return y.float().relu()


@pytest.mark.parametrize(
    "layer, input_grad, template",
    [
        ((3, 8, 4, 4), False, "conv_backward"),  # a stem: the image needs no gradient
        ((3, 8, 4, 4), True, "conv_backward"),
        ((8, 8, 7, 1, 8), True, "conv_depthwise_backward"),  # ConvNeXt's 7x7 depthwise
        ((8, 8, 7, 1, 8), False, "conv_depthwise_backward"),
    ],
    ids=["stem", "stem-dx", "depthwise", "depthwise-no-dx"],
)
def test_autocast_gradients_cast_to_float32_are_stored_rounded_as_aten(
    layer: tuple[int, ...], input_grad: bool, template: str
) -> None:
    """The float32 weight and bias gradients are bfloat16 gradients cast: the template rounds
    them to bfloat16 first, as aten's are (every value a bfloat16 one), not its float32 sums."""
    x = torch.randn(2, layer[0], 20, 20, requires_grad=input_grad)
    (sg,) = _backward_subgraphs(_Autocast(*layer), x)
    spec = lower(sg)
    assert spec.template == template
    assert {w for w, _ in spec.param("grads")} == {1, 2}
    assert [sg.output_meta[j][2] for _, j in spec.param("grads")] == ["float32", "float32"]
    check(sg, spec)
    got = build_kernel(spec)(*sg.make_inputs(1))
    for _, j in spec.param("grads"):
        torch.testing.assert_close(got[j], got[j].bfloat16().float(), rtol=0, atol=0)
