"""The bench's training workloads as `kernelpro warmup MODULE:FN` targets, at the bench's
"full" size on a GPU ("tiny" on the CPU): FN() -> (model, example inputs).

    kernelpro warmup kernelpro_backend.bench.warm_targets:gpt_block --nproc 2

The warm-up's loss is its default (the sum of the output), not the bench's, so the backward
graph's first subgraph differs from the bench's; the rest are the same subgraphs.

Owns: the target functions. Must not: warm up anything itself (`kernelpro warmup` does).
"""

from __future__ import annotations

import torch

from kernelpro_backend.bench.workloads import WORKLOADS


def _target(name: str) -> tuple[torch.nn.Module, tuple[object, ...]]:
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    workload = WORKLOADS[name](device, None, "full" if cuda else "tiny")
    return workload.model, workload.inputs


def gpt_block() -> tuple[torch.nn.Module, tuple[object, ...]]:
    return _target("gpt_block")


def mlp() -> tuple[torch.nn.Module, tuple[object, ...]]:
    return _target("mlp")


def convnet() -> tuple[torch.nn.Module, tuple[object, ...]]:
    return _target("convnet")
