"""A symbolic subgraph's kernels at the edges of a size bucket and inside it: each instance
(the subgraph traced at those sizes) lowers, and its kernel matches the instance's reference
under the Triton interpreter — tails and masks included, not only the size it was met at."""

from __future__ import annotations

import pytest
import torch
from harness import check

from kernelpro_backend import make_backend
from kernelpro_backend.codegen import Unsupported
from kernelpro_backend.fx_passes import Subgraph
from kernelpro_backend.fx_passes.concrete import free_symbols, instance, sizes_at
from kernelpro_backend.lowering import lower
from kernelpro_backend.rewrite.providers import NullProvider

SEQ = 9  # the length the symbolic graph is compiled at


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(32)
        self.lin = torch.nn.Linear(32, 48)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.lin(self.norm(x)).relu(), -1)


def _symbolic() -> list[Subgraph]:
    found: list[Subgraph] = []
    torch._dynamo.reset()
    compiled = torch.compile(
        Block(),
        backend=make_backend(
            provider=NullProvider(),
            observer=lambda k, sgs: found.extend(s for s in sgs if s.dynamic),
        ),
        options={"fallback": "eager", "dynamic_shapes": "off"},
        dynamic=True,
    )
    compiled(torch.randn(3, SEQ, 32, requires_grad=True)).sum().backward()
    return found


@pytest.mark.parametrize("seq", [16, 24, 32])  # the edges of the bucket (16, 32] and inside
def test_instances_across_a_bucket_lower_and_match_their_reference(seq):
    lowered = 0
    for sg in _symbolic():
        seq_symbols = {name for name, hint in free_symbols(sg.inputs).items() if hint == SEQ}
        static = instance(sg, sizes_at(sg.inputs, dict.fromkeys(seq_symbols, seq))).subgraph
        try:
            spec = lower(static)
        except Unsupported:
            continue
        check(static, spec)
        lowered += 1
        assert any(seq in shape or 3 * seq in shape for shape, _, _ in static.input_meta)
    assert lowered >= 3  # the norm, the GEMM with its epilogue and the row reductions
