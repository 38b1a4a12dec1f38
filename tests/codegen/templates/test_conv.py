"""The convolution forward templates ("conv": implicit GEMM; "conv_depthwise": direct) under
Triton's interpreter against F.conv2d with the fused epilogue (bias + ReLU + residual), on odd
shapes: stride 2, padding, dilation 2, groups 2, depthwise 7x7 and with a channel multiplier,
1x1, 13x11 images, NCHW and channels-last, float32 (IEEE and tf32) and bfloat16."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from harness import check, decomposed_subgraph

from kernelpro_backend.codegen import knob_space, render
from kernelpro_backend.lowering import lower


def _conv_subgraph(x_shape, w_shape, channels_last=False, dtype=torch.float32, **kw):  # type: ignore[no-untyped-def]
    """relu(conv2d(x, w, b) ) + r: the conv subgraph with its bias, activation and residual."""
    x, w = torch.randn(*x_shape, dtype=dtype), torch.randn(*w_shape, dtype=dtype)
    b = torch.randn(w_shape[0], dtype=dtype)
    if channels_last:
        x, w = (t.to(memory_format=torch.channels_last) for t in (x, w))
    r = torch.randn_like(F.conv2d(x, w, b, **kw))
    return decomposed_subgraph(
        lambda x, w, b, r: (F.relu(F.conv2d(x, w, b, **kw)) + r,), x, w, b, r
    )


CASES = {
    "stride2_pad1_dil2_groups2": ((2, 4, 13, 11), (6, 2, 3, 3), dict(stride=2, padding=1, dilation=2, groups=2)),
    "depthwise_7x7": ((2, 8, 13, 11), (8, 1, 7, 7), dict(padding=3, groups=8)),
    "depthwise_multiplier": ((1, 3, 9, 10), (6, 1, 3, 3), dict(stride=2, padding=1, groups=3)),
    "pointwise_1x1": ((2, 8, 9, 7), (16, 8, 1, 1), {}),
    "3x3_pad_asymmetric": ((1, 5, 13, 11), (7, 5, 3, 2), dict(padding=(1, 0), stride=(1, 2))),
}  # fmt: skip


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("name", list(CASES))
def test_forward_with_bias_relu_residual_matches_conv2d(name: str, channels_last: bool) -> None:
    x_shape, w_shape, kw = CASES[name]
    sg = _conv_subgraph(x_shape, w_shape, channels_last, **kw)
    assert sg.kind == "conv" and {"convolution", "relu", "add"} <= set(sg.ops)
    spec = lower(sg).with_precision("ieee")
    expected = "conv_depthwise" if w_shape[1] == 1 and kw.get("groups", 1) > 1 else "conv"
    assert spec.template == expected
    check(sg, spec)


def test_bfloat16_channels_last_accumulates_in_float32() -> None:
    sg = _conv_subgraph((2, 24, 9, 7), (16, 24, 3, 3), True, torch.bfloat16, padding=1)
    spec = lower(sg)
    assert spec.param("operand_dtype") == "bfloat16"
    check(sg, spec)
    dw = _conv_subgraph((2, 8, 9, 7), (8, 1, 5, 5), True, torch.bfloat16, padding=2, groups=8)
    check(dw)


def test_input_channels_over_several_k_blocks_and_tiles() -> None:
    """40 input channels in blocks of 16 (the last one masked), 2 groups of 24 output channels
    over 16-wide tiles, 13x11 pixels over 16-row tiles: every mask of the main loop."""
    sg = _conv_subgraph((2, 80, 13, 11), (48, 40, 3, 3), True, padding=1, groups=2)
    spec = lower(sg).with_precision("ieee")
    for knobs in (
        dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, num_warps=2, num_stages=2),
        dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=1, num_warps=4),
    ):
        check(sg, spec.with_knobs(**knobs))


def test_tf32_rounds_operands_to_nearest_as_cudnn() -> None:
    """Under the tf32 policy both operands are rounded to tf32 (products then exact in float32):
    the kernel matches conv2d of the rounded operands to float32 accuracy."""
    sg = _conv_subgraph((2, 8, 9, 7), (16, 8, 3, 3), padding=1)
    spec = lower(sg)
    assert spec.precision == "tf32" if torch.backends.cudnn.allow_tf32 else "ieee"
    check(sg, spec.with_precision("tf32"))
    assert 'input_precision="tf32"' in render(spec.with_precision("tf32")).source


def test_conv_output_read_twice_and_no_bias() -> None:
    """The convolution's own output and its epilogue both leave the subgraph."""
    x, w = torch.randn(2, 6, 11, 9), torch.randn(4, 6, 3, 3)
    sg = decomposed_subgraph(
        lambda x, w: (y := F.conv2d(x, w, stride=2), torch.sigmoid(y) * y), x, w
    )
    assert len(sg.outputs) == 2
    check(sg, lower(sg).with_precision("ieee"))


def test_knob_spaces_are_legal_and_bounded_by_the_problem() -> None:
    sg = _conv_subgraph((2, 4, 13, 11), (6, 2, 3, 3), groups=2)
    space = knob_space(lower(sg))
    assert space["BLOCK_N"] == (16,) and space["BLOCK_K"] == (16,)  # 3 channels, 2 per group
    dw = knob_space(lower(_conv_subgraph((2, 8, 13, 11), (8, 1, 7, 7), padding=3, groups=8)))
    assert max(dw["BLOCK_N"]) == 8


def test_conv1d_is_a_2d_conv_of_height_one() -> None:
    x, w, b = torch.randn(2, 6, 17), torch.randn(4, 3, 5), torch.randn(4)
    sg = decomposed_subgraph(
        lambda x, w, b: (F.gelu(F.conv1d(x, w, b, stride=2, padding=2, groups=2)),), x, w, b
    )
    spec = lower(sg).with_precision("ieee")
    assert spec.param("kernel") == (1, 5) and spec.param("padding") == (0, 2)
    check(sg, spec)
    dw = decomposed_subgraph(
        lambda x, w: (F.conv1d(x, w, padding=1, groups=6),), x, torch.randn(6, 1, 3)
    )
    check(dw)


def test_training_block_forward_with_the_relu_mask_output() -> None:
    """A Conv2d -> ReLU -> + x block's forward subgraph under torch.compile: the sum and the
    ReLU's boolean mask (saved for the backward) both stored by the conv kernel."""
    from harness import collect

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)

        def forward(self, x):  # type: ignore[no-untyped-def]
            return torch.relu(self.conv(x)) + x

    sgs = collect(Block(), [torch.randn(2, 4, 7, 5, requires_grad=True)])
    (sg,) = [s for s in sgs if s.kind == "conv" and s.graph == "forward"]
    assert "bool" in {dt for _, _, dt in sg.output_meta}
    check(sg, lower(sg).with_precision("ieee"))


def test_conv_subgraphs_are_search_candidates() -> None:
    """The search's space seeds a conv subgraph with its lowered spec, one-knob siblings and
    the implicit-GEMM seed tiles that are legal at its size; every one renders."""
    from kernelpro_backend.search import codegen_space

    sg = _conv_subgraph((2, 32, 13, 11), (64, 32, 3, 3), True, padding=1)
    space = codegen_space()
    found = space.initial(sg)
    assert len(found) >= 6 and found[0] == lower(sg)
    assert {c.template for c in found} == {"conv"}
    assert len({c.knobs for c in found}) == len(found)
    assert set(space.knob_roles(found[0]).values()) >= {"tile", "warps", "stages"}
    for candidate in found:
        render(candidate)


@pytest.mark.parametrize("precision", ["ieee", "tf32"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_weight_repack_either_way_matches_conv2d(channels_last: bool, precision: str) -> None:
    """PACK_W=1 reads B from the repacked (and, under tf32, pre-rounded) weight, PACK_W=0
    through the weight's own strides (rounding both tiles in the loop); PACK_X=1 reads A from
    the input's dense NHWC (pre-rounded) copy: grouped, strided, dilated, over several channel
    blocks and taps (20 input channels a group in blocks of 16)."""
    sg = _conv_subgraph(
        (2, 40, 13, 11), (24, 20, 3, 3), channels_last, stride=2, padding=1, dilation=2, groups=2
    )
    lowered = lower(sg)
    assert lowered.knob("PACK_W") == int(lowered.precision == "tf32" or not channels_last)
    spec = lowered.with_precision(precision)
    for pack in (0, 1):
        for pack_x in (0, 1):
            knobs = dict(PACK_W=pack, PACK_X=pack_x, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
            candidate = spec.with_knobs(**knobs, num_warps=2)
            source = render(candidate).source
            assert ("def pack_w(" in source, "def pack_x(" in source) == (bool(pack), bool(pack_x))
            check(sg, candidate)


def test_tf32_weight_repack_is_k_major() -> None:
    """Under tf32 (float32 on the TF32 tensor cores, whose wgmma reads shared memory K-major
    only) the repacked weight's B tile is contiguous along K, the 20 input channels of a group;
    IEEE and 16-bit keep it contiguous along N, the 12 output channels."""
    sg = _conv_subgraph((2, 40, 13, 11), (24, 20, 3, 3), padding=1, groups=2)
    spec = lower(sg).with_knobs(PACK_W=1)
    tf32 = render(spec.with_precision("tf32")).source
    assert "w_cols = wp + g * 2160 + rn * 20" in tf32
    assert "b = tl.load(w_cols + tap * 240 + ci[:, None]," in tf32
    assert "c = (e // 20) % 12" in tf32  # the pack walks K innermost
    ieee = render(spec.with_precision("ieee")).source
    assert "w_cols = wp + g * 2160 + rn\n" in ieee
    assert "b = tl.load(w_cols + (tap * 20 + ci[:, None]) * 12," in ieee


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_depthwise_by_rows_with_the_epilogue(channels_last: bool) -> None:
    """ROWS output rows a program (2, 4, 8), the epilogue (bias, ReLU, residual) on each row's
    accumulator; 13x11 images cut every tile; padding 3, and none (an output smaller than the
    input), and bfloat16."""
    for seed, (padding, rows, bm, bn) in enumerate(((3, 2, 8, 4), (3, 8, 16, 8), (0, 4, 8, 2))):
        sg = _conv_subgraph((2, 8, 13, 11), (8, 1, 7, 7), channels_last, padding=padding, groups=8)
        spec = lower(sg).with_precision("ieee")
        assert spec.knob("ROWS") == 0  # the default until the template is timed on a GPU
        check(sg, spec.with_knobs(ROWS=rows, BLOCK_M=bm, BLOCK_N=bn, num_warps=1), seed=seed)
    dw = _conv_subgraph((2, 8, 9, 7), (8, 1, 5, 5), True, torch.bfloat16, padding=2, groups=8)
    check(dw, lower(dw).with_knobs(ROWS=4, BLOCK_M=8, BLOCK_N=8, num_warps=1))


def test_depthwise_by_rows_refused_off_stride_1_and_seeded_on_it() -> None:
    from kernelpro_backend.codegen.defaults import seed_configs
    from kernelpro_backend.codegen.errors import IllegalSpec

    x_shape, w_shape, kw = CASES["depthwise_multiplier"]  # stride 2, two channels a group
    spec = lower(_conv_subgraph(x_shape, w_shape, True, **kw))
    with pytest.raises(IllegalSpec, match="cannot go by rows"):
        spec.with_knobs(ROWS=2, BLOCK_M=8, BLOCK_N=4, num_warps=1)
    assert all(c.knob("ROWS") == 0 for c in seed_configs(spec))
    big = lower(_conv_subgraph((2, 96, 56, 56), (96, 1, 7, 7), True, padding=3, groups=96))
    assert [c.knob("ROWS") for c in seed_configs(big) if c.knob("ROWS")] == [8, 8, 8]
    source = render(big.with_knobs(ROWS=8, BLOCK_M=8, BLOCK_N=32, num_warps=2)).source
    assert "acc7 += a * w6" in source
