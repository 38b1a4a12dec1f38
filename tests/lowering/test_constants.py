"""A subgraph that reads no tensor (iota arithmetic, as an MoE's expert indices) computes a
constant: it is left to the fallback, which folds it, with that reason. A kernel for it would
have no input to take its device from."""

from __future__ import annotations

import pytest
import torch

from kernelpro_backend.codegen.errors import Unsupported
from kernelpro_backend.explain import find_subgraphs
from kernelpro_backend.lowering import lower


class _Gather(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        index = torch.arange(x.shape[0], device=x.device) // 2  # reads no tensor
        return x[index] * 2.0


def test_a_subgraph_reading_no_tensor_is_left_to_the_fallback():
    sgs = find_subgraphs(_Gather(), torch.randn(64, 8), train=False, rewrites={})
    constants = [sg for sg in sgs if not sg.input_meta]
    assert constants, [sg.ops for sg in sgs]
    for sg in constants:
        with pytest.raises(Unsupported, match="reads no tensor"):
            lower(sg)
    for sg in sgs:
        if sg.input_meta:
            lower(sg)  # the rest still lowers
