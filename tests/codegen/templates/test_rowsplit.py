"""Split rows ("row_split", codegen/templates/rowsplit.py): a reduction over few long rows run
by SPLIT programs a row and a combining kernel, checked under Triton's interpreter against the
reference subgraph; which programs it takes, and when defaults.alternatives proposes it."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from harness import check, collect, decomposed_subgraph

from kernelpro_backend.codegen import IllegalSpec, alternatives, knob_space, render
from kernelpro_backend.codegen.cluster_rules import per_element_stores
from kernelpro_backend.codegen.split_rules import chunk_columns, split_problem
from kernelpro_backend.lowering import lower


def _split(fn, *inputs):  # type: ignore[no-untyped-def]
    sg = decomposed_subgraph(fn, *inputs)
    seed = lower(sg)
    found = [a for a in alternatives(seed) if a.template == "row_split"]
    return sg, seed, found


def test_a_full_reduction_is_split_over_many_programs_and_matches():
    """MSE as KernelBench's L1_94 writes it (mean of squared differences): one row of every
    element, which the row template gives to one program."""
    p, t = torch.rand(8, 3000), torch.rand(8, 3000)
    sg, seed, (alt,) = _split(lambda p, t: torch.mean((p - t) ** 2), p, t)
    assert seed.template == "row_reduction" and alt.knob("SPLIT") > 1
    check(sg, alt)
    # a chunk that is not a whole number of the row's columns, and a short last program
    odd = alt.with_knobs(SPLIT=4, BLOCK_C=1024, num_warps=4)
    assert chunk_columns(odd) == 6144 and 4 * 6144 > 24000
    check(sg, odd, seed=1)
    check(sg, alt.with_knobs(SPLIT=8, BLOCK_C=256, num_warps=2), seed=2)
    # bf16 inputs: the template computes in float32, partials included; the mean rounded once
    p16, t16 = p.bfloat16(), t.bfloat16()
    sg, _, (alt,) = _split(lambda p, t: torch.mean((p - t) ** 2), p16, t16)
    check(sg, alt)


class _Fn(torch.nn.Module):
    def __init__(self, fn) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor):  # type: ignore[no-untyped-def]
        return self.fn(x)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.sum(-1),
        lambda x: x.amax(-1),
        lambda x: x.amin(-1, keepdim=True),
        lambda x: (x.sum(-1) + x.amax(-1), x.abs().sum(-1) / 7.0),  # several reductions
        lambda x: F.kl_div(x.log_softmax(-1), x.sigmoid(), reduction="batchmean"),
        lambda x: F.layer_norm(x, (10000,)),  # a variance (Welford), a per-element output
    ],
    ids=["sum", "max", "min_keepdim", "several", "kl_div_batchmean", "layer_norm"],
)
def test_few_long_rows_match(fn) -> None:  # type: ignore[no-untyped-def]
    """Every split the model's subgraphs get (KL divergence: the loss's sum over every
    element after the log-softmax's rows) matches its subgraph, at the default and SPLIT=2."""
    x = torch.randn(3, 10000)
    checked = 0
    for sg in collect(_Fn(fn), [x], train=False):
        for alt in alternatives(lower(sg)):
            if alt.template == "row_split":
                check(sg, alt)
                check(sg, alt.with_knobs(SPLIT=2), seed=1)
                checked += 1
    assert checked >= 1


def test_per_element_outputs_after_the_reductions_match():
    """Each row's sum, then every element less it: the combining kernel writes its chunk of
    the row (chunks of whole blocks: the third one short, the fourth empty)."""
    x = torch.randn(4, 9000)
    sg, _, (alt,) = _split(lambda x: x - x.sum(-1, keepdim=True), x)
    check(sg, alt)
    odd = alt.with_knobs(SPLIT=4, BLOCK_C=1024, num_warps=4)
    assert chunk_columns(odd) == 3072 and 2 * 3072 < 9000 < 3 * 3072
    check(sg, odd, seed=1)


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_batch_norm_backward_splits_its_channels_and_matches(channels_last: bool) -> None:
    """A batch norm in training, NCHW: its backward's sums over N, H, W of a few channels are
    a few long strided rows, and its input gradient a per-element output beside a per-row one
    (stored by each row's first program)."""
    bn = torch.nn.BatchNorm2d(3)
    x = torch.randn(4, 3, 48, 48)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    x.requires_grad_()
    checked = 0
    for sg in collect(_Fn(lambda x: bn(x).relu()), [x]):
        for alt in alternatives(lower(sg)):
            if alt.template == "row_split":
                check(sg, alt)
                check(sg, alt.with_knobs(SPLIT=4, BLOCK_C=1024, num_warps=4), seed=1)
                full = per_element_stores(alt)
                checked += sg.graph == "backward" and 0 < len(full) < len(alt.stores)
    assert checked >= 1


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_batch_norm_forward_splits_its_statistics_and_matches(channels_last: bool) -> None:
    """A batch norm's training forward: its mean and variance over N, H, W of a few channels
    from each chunk's Welford pass, combined over the chunks (Chan), then the normalised output
    written chunk by chunk; on data centred far from zero too."""
    bn = torch.nn.BatchNorm2d(3)
    x = torch.randn(4, 3, 45, 47)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    (sg,) = [
        s for s in collect(_Fn(lambda x: bn(x).relu()), [x], train=False) if s.kind == "reduction"
    ]
    (alt,) = [a for a in alternatives(lower(sg)) if a.template == "row_split"]
    check(sg, alt)
    odd = alt.with_knobs(SPLIT=4, BLOCK_C=1024, num_warps=4)  # the last chunk short
    check(sg, odd, seed=1)
    inputs = sg.make_inputs(2)
    big = max(range(len(inputs)), key=lambda i: inputs[i].numel())
    inputs[big] = inputs[big] * 3 + 1000.0
    check(sg, odd, inputs=inputs)


def test_nan_in_a_chunk_reaches_the_row_maximum():
    x = torch.randn(2, 9000)
    sg, _, (alt,) = _split(lambda x: x.amax(-1), x)
    inputs = sg.make_inputs(0)
    inputs[0][1, 8500] = float("nan")  # the last program's chunk of row 1
    check(sg, alt, inputs=inputs)


def test_what_it_refuses_and_when_it_is_not_proposed():
    x = torch.randn(4, 8192)
    centred = lower(decomposed_subgraph(lambda x: x - x.sum(-1, keepdim=True), x))
    assert split_problem(centred) is None  # per-element outputs after one wave
    softmax = lower(decomposed_subgraph(lambda x: x.softmax(-1), x))
    assert "another reduction" in (split_problem(softmax) or "")
    var = lower(decomposed_subgraph(lambda x: ((x - x.mean(-1, keepdim=True)) ** 2).sum(-1), x))
    assert split_problem(var) is None  # a variance: its two waves are one Welford pass
    twice = lower(decomposed_subgraph(lambda x: ((x - x.mean(-1, keepdim=True)) * 2).sum(-1), x))
    assert "another reduction" in (split_problem(twice) or "")
    # many rows fill the GPU without splitting; short rows are not worth a second launch
    _, _, many = _split(lambda x: x.sum(-1), torch.randn(512, 8192))
    _, _, short = _split(lambda x: x.sum(-1), torch.randn(4, 2048))
    assert many == [] and short == []
    _, _, (alt,) = _split(lambda x: x.sum(-1), x)
    with pytest.raises(IllegalSpec, match="exceed"):
        alt.with_knobs(SPLIT=64, BLOCK_C=4096)
    with pytest.raises(IllegalSpec, match="row_split cannot compute"):
        dataclasses.replace(softmax, template="row_split", knobs=alt.knobs)
    assert set(knob_space(alt)) == {"SPLIT", "BLOCK_C", "num_warps", "num_stages"}


def test_rows_over_several_dims_are_addressed_by_their_flat_column():
    """A row that walks several dims in order (a full reduction of [64, 4095]) is addressed as
    row part + `col`, not 4095 * (col // 4095) + col % 4095: Triton then sees the contiguity
    (16-byte loads; with the coordinates it emitted scalar ones where 4095 is not a multiple of
    the vector) - both the row template's seed and split rows; values unchanged."""
    p, t = torch.rand(64, 4095), torch.rand(64, 4095)
    sg, seed, (alt,) = _split(lambda p, t: torch.mean((p - t) ** 2), p, t)
    for spec in (alt, seed.with_knobs(BLOCK_C=4096, ROWS=1)):
        source = render(spec).source
        assert "tl.load(in0 + col, mask=mask" in source and "tl.load(in1 + col" in source
        check(sg, spec)


def test_bfloat16_layer_norm_in_one_pass_matches() -> None:
    """bf16 values are computed in float32: the row template's one-pass variance and the
    split's, over 9000 columns (looped, the last block short)."""

    class _LayerNorm(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln = torch.nn.LayerNorm(9000)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.ln(x)

    x = torch.randn(3, 9000, dtype=torch.bfloat16)
    (sg,) = [s for s in collect(_LayerNorm().bfloat16(), [x], train=False) if s.kind == "reduction"]
    seed = lower(sg)
    check(sg, seed.with_knobs(BLOCK_C=1024, VARIANCE="welford", num_warps=4))
    (alt,) = [a for a in alternatives(seed) if a.template == "row_split"]
    check(sg, alt.with_knobs(SPLIT=4, BLOCK_C=1024, num_warps=4))
