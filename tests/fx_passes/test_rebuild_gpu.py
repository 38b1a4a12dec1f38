"""On a GPU: every forward and backward subgraph of the example models, traced on CUDA,
rebuilds from its canonical text under its own key and computes what the original computes
(bit for bit wherever the reference itself is bitwise reproducible, else within float32
tolerance)."""

from __future__ import annotations

import pytest
import torch

from kernelpro_backend import examples
from kernelpro_backend.explain import find_subgraphs
from kernelpro_backend.fx_passes import rebuild_subgraph

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", sorted(examples.EXAMPLES))
def test_every_cuda_subgraph_of_an_example_rebuilds_from_its_text(name):
    torch.set_float32_matmul_precision("highest")
    model, inputs = examples.EXAMPLES[name]("cuda")
    subgraphs = find_subgraphs(model, *inputs, train=True)
    assert {sg.graph for sg in subgraphs} == {"forward", "backward"}
    for sg in subgraphs:
        rebuilt = rebuild_subgraph(sg.text, sg.key, sg.kind, sg.pattern)
        assert rebuilt.key == sg.key, (sg.graph, sg.pattern)
        inputs_ = sg.make_inputs(1)
        with torch.no_grad():
            ref1, ref2 = sg.module()(*inputs_), sg.module()(*inputs_)
            got = rebuilt.module()(*inputs_)
        # CUDA attention returns its philox seed and offset as 0-dim int64 tensors that it
        # leaves unset without dropout (seen on H100: 4539628424878424895 in one run, 16 in
        # the other): whatever memory held, not a value to compare.
        pairs = [
            (a, b, c)
            for a, b, c in zip(ref1, ref2, got, strict=True)
            if not ("sdpa" in sg.pattern and a.dim() == 0 and not a.is_floating_point())
        ]
        reproducible = all(torch.equal(a, b) for a, b, _ in pairs)
        for a, _, b in pairs:
            if reproducible:
                assert torch.equal(b, a), (sg.graph, sg.pattern)
            else:
                torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-4, equal_nan=True)
