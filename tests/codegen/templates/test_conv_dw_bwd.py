"""The depthwise convolution backward template ("conv_depthwise_backward": dgrad and wgrad
direct, the weight gradient's pixels split and combined in order) under Triton's interpreter
against aten.convolution_backward: 3x3 stride 1 and 2, ConvNeXt's 7x7, 5x5 stride 2,
dilation 2, 13x11 images of 3 x 5 channels, every output_mask, channels-last, a channel
multiplier, 1-D, bfloat16, and the tail AOTAutograd fuses onto the input gradient; the input
and weight gradients by rows (ROWS, WG_ROWS) where they apply."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from harness import check, collect
from torch.fx.experimental.proxy_tensor import make_fx

from kernelpro_backend.codegen import render
from kernelpro_backend.codegen.defaults import seed_configs
from kernelpro_backend.codegen.errors import IllegalSpec
from kernelpro_backend.fx_passes import Subgraph, find_subgraphs
from kernelpro_backend.lowering import lower
from kernelpro_backend.tuner.admit import triton_source_problem

N, C, H, W = 3, 5, 13, 11
GEOMETRIES = {  # kernel, stride, padding, dilation
    "3x3_s1_p1": (3, 1, 1, 1),
    "3x3_s2_p1": (3, 2, 1, 1),
    "7x7_p3": (7, 1, 3, 1),
    "5x5_s2_p2": (5, 2, 2, 1),
    "3x3_d2_p2": (3, 1, 2, 2),
}


def _backward(
    geometry: tuple[int, int, int, int],
    mask: tuple[bool, bool, bool] = (True, True, True),
    dtype: torch.dtype = torch.float32,
    channels_last: bool = False,
    c_out: int = C,
    flat: bool = False,
) -> Subgraph:
    """The subgraph of one depthwise aten.convolution_backward with `mask` as its output_mask."""
    k, s, p, d = geometry
    x = torch.randn(N, C, W) if flat else torch.randn(N, C, H, W)
    w = torch.randn(c_out, 1, k) if flat else torch.randn(c_out, 1, k, k)
    conv = F.conv1d if flat else F.conv2d
    dy = torch.randn_like(conv(x, w, stride=s, padding=p, dilation=d, groups=C))
    if channels_last:
        x, w, dy = (t.contiguous(memory_format=torch.channels_last) for t in (x, w, dy))
    x, w, dy = (t.to(dtype) for t in (x, w, dy))
    dims = 1 if flat else 2

    def fn(dy, x, w):  # type: ignore[no-untyped-def]
        out = torch.ops.aten.convolution_backward(
            dy, x, w, [c_out], [s] * dims, [p] * dims, [d] * dims, False, [0] * dims, C,
            list(mask),
        )  # fmt: skip
        return tuple(g for g, m in zip(out, mask, strict=True) if m)

    gm = make_fx(fn, tracing_mode="fake")(dy, x, w)
    gm.graph.eliminate_dead_code()  # the getitems of the gradients not asked for, as AOT's
    (sg,) = find_subgraphs(gm, "backward")
    return sg


def _check_split_and_not(sg: Subgraph) -> None:
    """The default knobs, then small tiles (edges masked) with the weight gradient split the
    other way (several programs' partials combined, or one program storing)."""
    spec = lower(sg)
    assert spec.template == "conv_depthwise_backward" and spec.precision == "ieee"
    check(sg, spec)
    split = 1 if spec.knob("SPLIT_K") > 1 else 4
    pixels = spec.param("x_shape")[0] * spec.param("out_hw")[0] * spec.param("out_hw")[1]
    wm = min(64, 1 << (pixels // 4).bit_length() - 1)  # a step for each of four splits
    small = dict(
        ROWS=0, BLOCK_M=64, BLOCK_N=4, WG_BLOCK_M=wm, WG_BLOCK_N=4, SPLIT_K=split, num_warps=4
    )
    check(sg, spec.with_knobs(**small), seed=1)


@pytest.mark.parametrize("geometry", GEOMETRIES.values(), ids=GEOMETRIES.keys())
def test_all_three_gradients_match_aten(geometry: tuple[int, int, int, int]) -> None:
    _check_split_and_not(_backward(geometry))


MASKS = [(True, True, False), (False, True, True), (False, True, False), (True, False, False),
         (True, False, True), (False, False, True)]  # fmt: skip


@pytest.mark.parametrize(
    "mask", MASKS, ids=["".join("xwb"[i] for i in range(3) if m[i]) for m in MASKS]
)
def test_each_output_mask(mask: tuple[bool, bool, bool]) -> None:
    """The input gradient alone (frozen weights), the weight gradient alone (a first layer),
    the bias gradient with either or alone."""
    sg = _backward(GEOMETRIES["3x3_s2_p1"], mask)
    assert {w for w, _ in lower(sg).param("grads")} == {i for i in (1, 2) if mask[i]}
    _check_split_and_not(sg)


def test_channels_last_with_channel_multiplier() -> None:
    """Channels-last operands (the gradients stored in the input's and weight's layout), two
    output channels a group."""
    sg = _backward(GEOMETRIES["3x3_s2_p1"], channels_last=True, c_out=2 * C)
    assert lower(sg).knob("WG_BLOCK_N") > 1  # channels fastest where they are contiguous
    _check_split_and_not(sg)


def test_conv1d_and_bfloat16_accumulate_in_float32() -> None:
    _check_split_and_not(_backward((7, 1, 3, 1), flat=True))
    _check_split_and_not(_backward(GEOMETRIES["5x5_s2_p2"], dtype=torch.bfloat16))


class _Block(nn.Module):
    """Two depthwise convolutions, ReLU between, a residual: the second's input gradient
    carries ReLU's mask and the residual's gradient as its tail."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(C, C, 3, padding=1, groups=C)
        self.b = nn.Conv2d(C, C, 5, padding=2, groups=C)

    def forward(self, x):  # type: ignore[no-untyped-def]
        y = F.relu(self.a(x))
        return F.relu(self.b(y)) + y


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_input_gradient_tail_in_a_trained_block(channels_last: bool) -> None:
    model, x = _Block(), torch.randn(N, C, H, W, requires_grad=True)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.detach().to(memory_format=torch.channels_last).requires_grad_()
    found = [s for s in collect(model, [x]) if s.kind == "conv" and s.graph == "backward"]
    assert len(found) == 2 and any(len(s.ops) > 1 for s in found)
    for seed, sg in enumerate(found):
        spec = check(sg, seed=seed)
        assert spec.template == "conv_depthwise_backward"


def test_wgrad_register_budget_and_split_refused_where_illegal() -> None:
    """ConvNeXt's 7x7 keeps 49 accumulator tiles in registers: a 512-pixel step over 4 warps
    is 196 a thread, refused; so are more splits than the pixels fill."""
    sg = _backward(GEOMETRIES["7x7_p3"])
    spec = lower(sg)
    with pytest.raises(IllegalSpec, match="registers a thread"):
        spec.with_knobs(WG_BLOCK_M=512, WG_BLOCK_N=1, num_warps=4)
    with pytest.raises(IllegalSpec, match="SPLIT_K=128"):
        spec.with_knobs(SPLIT_K=128, WG_BLOCK_M=16)
    rendered = render(spec.with_knobs(SPLIT_K=2))
    assert "acc_48 +=" in rendered.source and "tl.dot" not in rendered.source
    # a bundle's copy of it passes the grammar outside sources are held to
    assert triton_source_problem(rendered.source, rendered.entry) is None


def test_convnext_default_splits_the_weight_gradient() -> None:
    """The default of ConvNeXt's 32 x 96 x 56 x 56 7x7 (lowered, not run): one channel a
    program in NCHW and the 100352 pixels split so that some 500 programs run."""
    x, w = torch.empty(32, 96, 56, 56), torch.empty(96, 1, 7, 7)
    dy = torch.empty(32, 96, 56, 56)

    def fn(dy, x, w):  # type: ignore[no-untyped-def]
        return torch.ops.aten.convolution_backward(
            dy, x, w, [96], [1, 1], [3, 3], [1, 1], False, [0, 0], 96, [True, True, True]
        )

    gm = make_fx(fn, tracing_mode="fake")(dy, x, w)
    (sg,) = find_subgraphs(gm, "backward")
    spec = lower(sg)
    assert spec.knob("WG_BLOCK_N") == 1 and 96 * spec.knob("SPLIT_K") >= 500


@pytest.mark.parametrize("geometry", ["3x3_s1_p1", "7x7_p3"])
def test_channels_last_input_gradient_by_rows(geometry: str) -> None:
    """Channels-last at stride 1 goes by rows by default; 2, 4 and 8 rows, columns and
    channels cut by the edges (13 rows, 11 columns, 5 channels), against aten."""
    sg = _backward(GEOMETRIES[geometry], channels_last=True)
    spec = lower(sg)
    assert spec.knob("ROWS") == 8
    check(sg, spec)
    for seed, (rows, bm, bn) in enumerate(((2, 8, 4), (4, 16, 2), (8, 8, 8)), start=1):
        check(sg, spec.with_knobs(ROWS=rows, BLOCK_M=bm, BLOCK_N=bn, num_warps=1), seed=seed)


def test_input_gradient_by_rows_alone_in_bfloat16_and_nchw() -> None:
    """The input gradient alone, bf16 (float32 accumulators, one rounding), and by rows on
    NCHW operands too (the search may try it there)."""
    sg = _backward(GEOMETRIES["7x7_p3"], (True, False, False), torch.bfloat16, channels_last=True)
    check(sg, lower(sg))
    sg = _backward(GEOMETRIES["3x3_s1_p1"])
    assert lower(sg).knob("ROWS") == 0  # NCHW: the flat tile, measured 3-4x cuDNN there
    rows = dict(ROWS=4, BLOCK_M=8, BLOCK_N=4, num_warps=1, WG_BLOCK_M=64, SPLIT_K=1)
    check(sg, lower(sg).with_knobs(**rows))


@pytest.mark.parametrize(
    ("geometry", "c_out", "flat", "why"),
    [
        ("3x3_s2_p1", C, False, "stride 1 and dilation 1"),
        ("3x3_d2_p2", C, False, "stride 1 and dilation 1"),
        ("3x3_s1_p1", 2 * C, False, "one output channel a group"),
        ("3x3_s1_p1", C, True, "1-D"),
    ],
)
def test_rows_refused_where_a_row_does_not_feed_fixed_rows(geometry, c_out, flat, why) -> None:  # type: ignore[no-untyped-def]
    k, s, p, d = GEOMETRIES[geometry]
    sg = _backward((k, s, p, d), channels_last=not flat, c_out=c_out, flat=flat)
    spec = lower(sg)
    assert spec.knob("ROWS") == 0
    with pytest.raises(IllegalSpec, match=why):
        spec.with_knobs(ROWS=2, BLOCK_M=8, BLOCK_N=4, num_warps=1)


def test_convnext_channels_last_defaults_by_rows_within_the_register_budget() -> None:
    """ConvNeXt's 32 x 96 x 56 x 56 7x7 in channels-last (lowered and rendered, not run): by
    8 rows of 8 x 32; a tile of 8 rows of 64 x 64 on one warp is refused; the source passes
    the grammar a bundle's copy is held to."""
    cl = torch.channels_last
    x = torch.empty(32, 96, 56, 56).contiguous(memory_format=cl)
    w = torch.empty(96, 1, 7, 7).contiguous(memory_format=cl)
    dy = torch.empty(32, 96, 56, 56).contiguous(memory_format=cl)

    def fn(dy, x, w):  # type: ignore[no-untyped-def]
        return torch.ops.aten.convolution_backward(
            dy, x, w, [96], [1, 1], [3, 3], [1, 1], False, [0, 0], 96, [True, True, True]
        )

    (sg,) = find_subgraphs(make_fx(fn, tracing_mode="fake")(dy, x, w), "backward")
    spec = lower(sg)
    assert (spec.knob("ROWS"), spec.knob("BLOCK_M"), spec.knob("BLOCK_N")) == (8, 8, 32)
    by_rows = [c for c in seed_configs(spec) if c.knob("WG_ROWS")]
    assert len(by_rows) == 3  # every weight-gradient-by-rows seed is legal at this size
    assert all(96 // c.knob("WG_BLOCK_N") * c.knob("SPLIT_K") >= 256 for c in by_rows)
    with pytest.raises(IllegalSpec, match="ROWS=8 accumulators .* registers a thread"):
        spec.with_knobs(ROWS=8, BLOCK_M=64, BLOCK_N=64, num_warps=1)
    rendered = render(spec)
    assert "acc7 += a * w6" in rendered.source
    assert triton_source_problem(rendered.source, rendered.entry) is None


@pytest.mark.parametrize(
    "mask", [(True, True, True), (False, True, False), (False, False, True)], ids=["xwb", "w", "b"]
)
@pytest.mark.parametrize("geometry", ["3x3_s1_p1", "7x7_p3"])
def test_weight_gradient_by_rows(geometry: str, mask: tuple[bool, bool, bool]) -> None:
    """2, 4 and 8 output rows a step (13 rows, 11 columns, 5 channels: every edge cut), one
    program storing and several programs' partials combined, channels-last and NCHW."""
    for channels_last in (True, False):
        sg = _backward(GEOMETRIES[geometry], mask, channels_last=channels_last)
        spec = lower(sg)
        assert spec.knob("WG_ROWS") == 0  # the default until it is timed on a GPU
        for seed, (rows, wm, wn, split) in enumerate(((2, 8, 4, 1), (4, 16, 2, 2), (8, 8, 8, 4))):
            knobs = dict(WG_ROWS=rows, WG_BLOCK_M=wm, WG_BLOCK_N=wn, SPLIT_K=split, num_warps=1)
            check(sg, spec.with_knobs(**knobs), seed=seed)


def test_weight_gradient_rows_refused_at_stride_2() -> None:
    spec = lower(_backward(GEOMETRIES["3x3_s2_p1"], channels_last=True))
    with pytest.raises(IllegalSpec, match="weight gradient cannot go by rows"):
        spec.with_knobs(WG_ROWS=2, WG_BLOCK_M=8, WG_BLOCK_N=4, SPLIT_K=1)


def test_specs_cached_before_the_rows_knobs_still_load() -> None:
    """A spec written before ROWS and WG_ROWS loads as the flat kernels it described (NCHW:
    its default is flat too, so the spec round-trips equal)."""
    import json

    from kernelpro_backend.codegen import KernelSpec

    spec = lower(_backward(GEOMETRIES["3x3_s1_p1"]))
    raw = json.loads(spec.to_json())
    raw["knobs"] = [kv for kv in raw["knobs"] if kv[0] not in ("ROWS", "WG_ROWS")]
    assert KernelSpec.from_json(json.dumps(raw)) == spec
