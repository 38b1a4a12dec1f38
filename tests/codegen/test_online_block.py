"""ONLINE="block": a column loop's online max and sum of exp per block (the block's max reduced
first, one exp an element) instead of per lane (two exps an element). Under the interpreter it
computes what PyTorch does — rows holding NaN, -inf and +inf included — and it is legal only
where there is such a loop."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from harness import check, decomposed_subgraph

from kernelpro_backend.codegen import IllegalSpec, KernelSpec, knob_space, render
from kernelpro_backend.lowering import lower
from kernelpro_backend.runtime.spec_kernel import build_kernel


def _rows(rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(1)).to(dtype) * 4
    x[1, 7] = float("nan")
    x[2, :] = float("-inf")
    x[3, 5] = float("inf")
    x[4, :] = -1e30  # a huge negative row: the rescale must not overflow
    return x


FNS = {
    "softmax": lambda x: (torch.softmax(x, -1),),
    "log_softmax": lambda x: (torch.log_softmax(x, -1),),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("op", sorted(FNS))
def test_block_statistics_match_pytorch(op: str, dtype: torch.dtype) -> None:
    x = _rows(8, 300, dtype)
    sg = decomposed_subgraph(FNS[op], x)
    lane = lower(sg).with_knobs(BLOCK_C=64)
    block = lane.with_knobs(ONLINE="block")
    source = render(block).source
    assert "for c0 in range(" in source and "tl.full([ROWS, 1]" in source
    assert source.count("tl.exp(") < render(lane).source.count("tl.exp(")
    check(sg, block, inputs=[x])
    (got,), (want,) = build_kernel(block)(x), build_kernel(lane)(x)
    assert got.isnan().equal(want.isnan())  # NaN exactly where the lane form has it


def test_cross_entropy_with_block_statistics() -> None:
    x = _rows(6, 90, torch.float32)
    t = torch.tensor([3, 7, 0, 89, 0, -100])
    sg = decomposed_subgraph(lambda x, t: (F.cross_entropy(x, t, reduction="none"),), x, t)
    spec = lower(sg).with_knobs(BLOCK_C=32, ONLINE="block")
    check(sg, spec, inputs=[t, x] if sg.input_meta[0][2] == "int64" else [x, t])


def test_block_is_legal_only_on_an_online_column_loop() -> None:
    x = torch.randn(4, 300)
    softmax = lower(decomposed_subgraph(FNS["softmax"], x))
    assert "ONLINE" in knob_space(softmax.with_knobs(BLOCK_C=64))
    assert knob_space(softmax.with_knobs(BLOCK_C=64))["ONLINE"] == ("lane", "block")
    with pytest.raises(IllegalSpec, match="ONLINE=block"):
        softmax.with_knobs(BLOCK_C=512, ONLINE="block")  # the row fits one block: no loop
    total = lower(decomposed_subgraph(lambda x: (x.sum(-1),), x)).with_knobs(BLOCK_C=64)
    assert knob_space(total)["ONLINE"] == ("lane",)  # a sum has no online statistics
    # logsumexp's max is cleaned of infinities before the exp: two passes, no online pair
    lse = lower(decomposed_subgraph(lambda x: (torch.logsumexp(x, -1),), x)).with_knobs(BLOCK_C=64)
    assert knob_space(lse)["ONLINE"] == ("lane",)


def test_a_cached_row_spec_without_the_knob_loads_as_the_lane_form() -> None:
    spec = lower(decomposed_subgraph(FNS["softmax"], torch.randn(4, 300))).with_knobs(BLOCK_C=64)
    old = spec.to_json().replace(',["ONLINE","lane"]', "").replace('["ONLINE","lane"],', "")
    assert "ONLINE" not in old
    assert KernelSpec.from_json(old) == spec
