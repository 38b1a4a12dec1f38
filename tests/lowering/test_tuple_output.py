"""A group whose output is a tuple (a multi-output op such as chunk's split, used outside the
group) is refused for that reason, not as one with symbolic sizes: the rewrite's warning about
dynamic shapes told users to warm sizes up that were never dynamic."""

from __future__ import annotations

import pytest
import torch
from harness import collect

from kernelpro_backend.codegen.errors import Unsupported
from kernelpro_backend.lowering import lower


def test_a_tuple_output_is_named_as_such_and_not_taken_for_dynamic_sizes(caplog):
    # gMLP's spatial gating unit chunks a GEMM's output and sends one half to a LayerNorm in
    # another group: the split's tuple leaves the GEMM's group. That group has no kernel, for
    # that reason, not for symbolic sizes (the warning told users to warm sizes up)
    class Gate(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(32, 64)
            self.norm = torch.nn.LayerNorm(32)

        def forward(self, x):  # type: ignore[no-untyped-def]
            u, v = torch.nn.functional.gelu(self.proj(x)).chunk(2, -1)
            return (u * self.norm(v).transpose(1, 2).transpose(1, 2)).sum()

    with caplog.at_level("INFO", logger="kernelpro"):
        found = collect(Gate(), [torch.randn(2, 16, 32, requires_grad=True)], train=True)
    tupled = [sg for sg in found if sg.tuple_output]
    assert tupled
    for sg in tupled:
        with pytest.raises(Unsupported, match="an output is a tuple"):
            lower(sg)
    assert "symbolic sizes" not in caplog.text
