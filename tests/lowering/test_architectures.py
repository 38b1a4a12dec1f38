"""Blocks of well-known architectures, written as their authors write them (architectures/,
in KernelBench's format: Model, get_inputs, get_init_inputs): every subgraph of their forward
and backward graphs, trained with their inputs' gradients, lowers to a template and matches its
reference under Triton's interpreter, but for attention with a padding mask and constants.
Found this way and fixed (2026-11-27): Swin's torch.roll needed fmod; its heads, picked from
a permuted QKV view, and an MLP-Mixer's transposed copy of a backward GEMM's residual sum
were read at two index maps, which sent whole GEMM groups to the fallback; BERT's attention
output was loaded through a view with stale strides, so its copy kernel computed wrong values
(caught by the check, as the search's validation catches it). CLIP's backward (two gradients of
one value, one transposed, in one group) and a GCN's row sums read per column now lower as
the parts of a cut group (lowering/split.py), and so, since convolution groups are cut too,
does Conformer's depthwise conv1d backward, whose tail reads the input gradient transposed."""

from __future__ import annotations

import pathlib

import pytest
import torch
from harness import check, collect

from kernelpro_backend.bench.problems import load_problem_module
from kernelpro_backend.codegen.errors import Unsupported
from kernelpro_backend.lowering import lower

ARCHITECTURES = sorted((pathlib.Path(__file__).parent / "architectures").glob("*.py"))
# attention with a padding mask goes to SDPA's own kernels; a subgraph reading no tensor
# (torch.roll's index arithmetic) is folded by the fallback
LEFT_TO_FALLBACK = (
    "attention with attn_mask is not supported",
    "attention backward with attn_mask is not supported",
    "the subgraph reads no tensor",
)


@pytest.mark.parametrize("path", ARCHITECTURES, ids=[p.stem for p in ARCHITECTURES])
def test_every_subgraph_lowers_and_matches(path: pathlib.Path) -> None:
    module = load_problem_module(path)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    inputs = [
        x.requires_grad_() if torch.is_tensor(x) and x.is_floating_point() else x
        for x in module.get_inputs()
    ]
    subgraphs = collect(model, inputs, train=True)
    assert {sg.graph for sg in subgraphs} == {"forward", "backward"}
    checked = 0
    for seed, sg in enumerate(subgraphs):
        try:
            spec = lower(sg)
        except Unsupported as e:
            assert str(e).startswith(LEFT_TO_FALLBACK), f"{sg.graph} {sg.pattern}: {e}"
            continue
        check(sg, spec, seed=seed)
        checked += 1
    assert checked >= len(subgraphs) // 2
