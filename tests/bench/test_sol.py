"""The bench's speed of light per workload (its subgraphs' SOL plus the optimizer's traffic)
and its roofline points, on the CPU with stand-in ceilings."""

import dataclasses

import torch

from kernelpro_backend.bench.sol import (
    ADAMW_ACCESSES,
    optimizer_bytes,
    sol_hooks,
    workload_subgraphs,
)
from kernelpro_backend.bench.workloads import WORKLOADS
from kernelpro_backend.profilers.ceilings import Ceilings
from kernelpro_backend.profilers.speed_of_light import SpeedOfLight

CPU = torch.device("cpu")
CEILINGS = Ceilings("test", 1e12, 50e12, 400e12, 800e12, 50 * 2**20)


def test_softmax_has_one_subgraph_whose_sol_is_its_bytes_at_the_bandwidth():
    w = WORKLOADS["softmax"](CPU, None, "tiny")
    found = workload_subgraphs(w)
    assert len(found) == 1
    sol_fn, subgraph_fn = sol_hooks(CEILINGS)
    x = w.inputs[0]
    moved = 2 * x.numel() * x.element_size()  # read the input, write the output
    assert abs(sol_fn(w) - 1e3 * moved / CEILINGS.dram_bytes_per_s) < 1e-12
    (point,) = subgraph_fn(w)
    assert point.bytes == moved and point.flops > 0 and point.ms > 0


def test_a_training_step_counts_forward_backward_and_adamw_traffic():
    w = WORKLOADS["mlp"](CPU, None, "tiny")
    found = workload_subgraphs(w)
    assert {sg.graph for sg in found} == {"forward", "backward"}
    params = sum(p.numel() * p.element_size() for p in w.fresh_model().parameters())
    assert optimizer_bytes(w) == ADAMW_ACCESSES * params
    sol_fn, _ = sol_hooks(CEILINGS)
    subgraphs_ms = sum(SpeedOfLight.for_subgraph(sg, CEILINGS)[2] for sg in found)
    expected = subgraphs_ms + 1e3 * ADAMW_ACCESSES * params / CEILINGS.dram_bytes_per_s
    assert abs(sol_fn(w) - expected) < 1e-9 * expected


def test_a_workload_that_fails_to_trace_gets_no_sol_and_no_points(caplog):
    w = WORKLOADS["softmax"](CPU, None, "tiny")

    class Broken(torch.nn.Module):
        def forward(self, x):
            raise RuntimeError("cannot trace this")

    w = dataclasses.replace(w, model=Broken())
    sol_fn, subgraph_fn = sol_hooks(CEILINGS)
    assert sol_fn(w) is None and subgraph_fn(w) == []
    assert "finding the subgraphs of softmax failed" in caplog.text
