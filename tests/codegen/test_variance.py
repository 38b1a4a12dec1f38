"""var and std over a dimension (any correction, keepdim or not, one block or looped) lower
to the row template through var_mean's expansion and match PyTorch under the interpreter."""

from __future__ import annotations

import pytest
import torch
from harness import check
from torch._inductor.decomposition import select_decomp_table
from torch.fx.experimental.proxy_tensor import make_fx

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
