"""var and std over a dimension (any correction, keepdim or not, one block or looped) lower
to the row template through var_mean's expansion and match PyTorch under the interpreter."""

from __future__ import annotations

import pytest
import torch
from harness import check
from torch._inductor.decomposition import select_decomp_table
from torch.fx.experimental.proxy_tensor import make_fx

from kernelpro_backend.codegen import IllegalSpec
from kernelpro_backend.codegen.defaults import seed_configs
from kernelpro_backend.codegen.program_walk import variance_pairs
from kernelpro_backend.fx_passes import find_subgraphs
from kernelpro_backend.lowering import lower


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: (x.var(-1),),
        lambda x: (torch.var(x, 1, correction=0, keepdim=True),),
        lambda x: (x.std(-1, keepdim=True),),
        lambda x: (torch.std(x, (1, 2), correction=0),),
    ],
    ids=["var", "var_population_keepdim", "std_keepdim", "std_two_dims"],
)
@pytest.mark.parametrize("cols", [40, 600])
def test_variance_family_matches_pytorch(fn, cols):
    x = torch.randn(6, 7, cols)
    gm = make_fx(fn, tracing_mode="fake", decomposition_table=select_decomp_table())(x)
    (sg,) = find_subgraphs(gm, "inference")
    spec = lower(sg)
    assert spec.template == "row_reduction"
    check(sg, spec)
    reduced = 1
    for d in spec.reduced:
        reduced *= spec.domain[d]
    looped = spec.with_knobs(BLOCK_C=16 if reduced > 16 else 4, ROWS=2, num_warps=1)
    check(sg, looped)  # several column blocks per row
    # the sum and the squared deviations in one pass (Welford), the last block masked
    check(sg, looped.with_knobs(VARIANCE="welford"))


class _BatchNorm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(x).relu()


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_batch_norm_statistics_in_one_pass_match(channels_last: bool) -> None:
    """A batch norm in training: its mean and variance over N, H, W (long strided rows, the
    last block short) from one Welford pass, then the normalised output; on data centred far
    from zero too, where a sum of squares would cancel."""
    from harness import collect

    x = torch.randn(4, 3, 45, 47)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    (sg,) = [s for s in collect(_BatchNorm(), [x], train=False) if s.kind == "reduction"]
    spec = lower(sg)
    n_cols = 4 * 45 * 47
    sums = [i for i, (op, _, _) in enumerate(spec.ops) if op == "sum"]
    assert len(variance_pairs(spec, sums, n_cols)) == 1
    for block in (1024, 256):
        one_pass = spec.with_knobs(BLOCK_C=block, VARIANCE="welford", num_warps=4)
        check(sg, one_pass)
        inputs = sg.make_inputs(1)
        big = max(range(len(inputs)), key=lambda i: inputs[i].numel())
        inputs[big] = inputs[big] * 3 + 1000.0
        check(sg, one_pass, inputs=inputs)


def test_welford_is_offered_only_where_a_column_loop_has_a_variance() -> None:
    def lowered(fn, x):  # type: ignore[no-untyped-def]
        decomp = select_decomp_table()
        gm = make_fx(fn, tracing_mode="fake", decomposition_table=decomp)(x)
        (sg,) = find_subgraphs(gm, "inference")
        return sg, lower(sg)

    sg, wide = lowered(
        lambda x: (torch.nn.functional.layer_norm(x, (20000,)),), torch.randn(2, 20000)
    )
    assert wide.knob("VARIANCE") == "passes" and wide.knob("BLOCK_C") < 20000  # looped
    (one_pass,) = [s for s in seed_configs(wide) if s.knob("VARIANCE") == "welford"]
    check(sg, one_pass)
    _, short = lowered(lambda x: (x.var(-1),), torch.randn(4, 100))  # one block: no loop
    assert seed_configs(short) == []
    with pytest.raises(IllegalSpec, match="VARIANCE=welford"):
        short.with_knobs(VARIANCE="welford")
    _, softmax = lowered(lambda x: (x.softmax(-1),), torch.randn(2, 20000))  # no variance
    with pytest.raises(IllegalSpec, match="VARIANCE=welford"):
        softmax.with_knobs(VARIANCE="welford")
