"""GPU: inlined kernels compiled by Inductor into its own generated code, numerics as eager."""

from __future__ import annotations

import pytest
import torch
from helpers import train

from kernelpro_backend import examples, make_backend
from kernelpro_backend.backend import CompileSession
from kernelpro_backend.codegen import Unsupported, build
from kernelpro_backend.fx_passes import Subgraph
from kernelpro_backend.lowering import lower

pytestmark = pytest.mark.gpu


class RowwiseSpecProvider:
    def find(self, subgraph: Subgraph):
        if subgraph.kind not in ("reduction", "pointwise"):
            return None
        try:
            return build(lower(subgraph))
        except Unsupported:
            return None


@pytest.mark.parametrize("launch", ["inline", "op"])
def test_transformer_block_trains_with_inlined_kernels(launch):
    from torch._inductor.utils import run_and_get_code

    model_ref, (x,) = examples.transformer_block("cuda")
    model, _ = examples.transformer_block("cuda")
    ref_losses, ref_grads = train(model_ref, x)
    sessions: list[CompileSession] = []
    backend = make_backend(provider=RowwiseSpecProvider(), sessions=sessions)
    compiled = torch.compile(model, backend=backend, options={"launch": launch})
    (losses, grads), code = run_and_get_code(lambda: train(model, x, lambda m: compiled))
    torch.testing.assert_close(losses, ref_losses, rtol=1e-5, atol=1e-6)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)
    reports = [r for s in sessions for r in s.reports]
    replaced = sum(len(r.replaced) for r in reports)
    inlined = sum(len(r.inlined) for r in reports)
    assert replaced >= 4
    source = "\n".join(code)
    if launch == "inline":
        assert inlined == replaced
        assert "kernelpro.launch" not in source
    else:
        assert inlined == 0
        assert "kernelpro.launch" in source
