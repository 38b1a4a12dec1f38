"""Instance norm (PyTorch views it as [1, N*C, L] and reduces dims 0 and 2, dim 0 of size 1)
lowers to the row template and matches PyTorch under the interpreter, with and without its
affine weight, in one block and looped; so do group norm (its affine weight read through an
as_strided that is a reshape) and batch norm in training."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from harness import check
from torch._inductor.decomposition import select_decomp_table
from torch.fx.experimental.proxy_tensor import make_fx

from kernelpro_backend.fx_passes import find_subgraphs
from kernelpro_backend.lowering import lower

C = 6


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, w, b: (F.instance_norm(x),),
        lambda x, w, b: (F.instance_norm(x, weight=w, bias=b),),
        lambda x, w, b: (F.group_norm(x, 3),),
        lambda x, w, b: (F.group_norm(x, 3, w, b),),
        lambda x, w, b: (F.batch_norm(x, None, None, w, b, training=True),),
    ],
    ids=["instance", "instance_affine", "group", "group_affine", "batch_train"],
)
def test_norms_over_a_unit_dim_lower_and_match(fn):
    inputs = (torch.randn(4, C, 40), torch.randn(C), torch.randn(C))
    gm = make_fx(fn, tracing_mode="fake", decomposition_table=select_decomp_table())(*inputs)
    (sg,) = [s for s in find_subgraphs(gm, "inference") if s.kind == "reduction"]
    spec = lower(sg)
    check(sg, spec)
    check(sg, spec.with_knobs(BLOCK_C=16, ROWS=1, num_warps=1))  # several column blocks
