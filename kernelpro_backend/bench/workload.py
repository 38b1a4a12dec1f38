"""What one benchmark case is: a model, its inputs and, for training, a loss and an optimizer.

Owns: the `Workload` record, the dtype defaults (`resolve_dtype`), the per-mode copy of a
workload's model (`fresh_model`), so every mode starts from the same weights, and the training
workloads' optimizer (`adamw`).
Must not: compile, time or compare anything (the runner does that).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, Literal

import torch
import torch.nn as nn

Size = Literal["tiny", "full"]
SIZES: tuple[str, ...] = ("tiny", "full")

LossFn = Callable[[object], torch.Tensor]
OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]


@dataclasses.dataclass
class Workload:
    """One case the bench runs under every mode.

    `loss_fn` set: a training step (forward, loss, backward, optimizer step); outputs and
    parameter gradients of the first step are checked against eager.
    `loss_fn` None: inference (forward under `torch.no_grad()`); outputs are checked."""

    name: str
    model: nn.Module
    inputs: tuple[Any, ...]  # tensors, plus any plain values a problem file passes
    dtype: torch.dtype
    size: str
    loss_fn: LossFn | None = None
    make_optimizer: OptimizerFactory | None = None
    source: str = "builtin"  # "builtin" or the path of a KernelBench-format file

    @property
    def training(self) -> bool:
        return self.loss_fn is not None

    @property
    def kind(self) -> str:
        return "training" if self.training else "inference"

    @property
    def device(self) -> torch.device:
        for value in self.inputs:
            if isinstance(value, torch.Tensor):
                return value.device
        return torch.device("cpu")

    def record(self) -> dict[str, str]:
        """What a result row says of the workload: kind, dtype, size and source."""
        dtype = str(self.dtype).removeprefix("torch.")
        return {"kind": self.kind, "dtype": dtype, "size": self.size, "source": self.source}

    def fresh_model(self) -> nn.Module:
        """A deep copy of the model with the original weights (each mode gets its own, so an
        optimizer step in one mode never changes the weights another mode starts from)."""
        model = copy.deepcopy(self.model)
        model.train(self.training)
        return model


WorkloadFactory = Callable[[torch.device, "torch.dtype | None", str], Workload]


def resolve_dtype(
    device: torch.device, requested: torch.dtype | None, cuda_default: torch.dtype
) -> torch.dtype:
    """The dtype a workload runs in: the one asked for, else the workload's GPU default on
    CUDA and float32 on the CPU (CPU bf16 kernels are slow and not what anyone benchmarks)."""
    if requested is not None:
        return requested
    return cuda_default if device.type == "cuda" else torch.float32


def check_size(size: str) -> None:
    if size not in SIZES:
        raise ValueError(f"unknown workload size {size!r}; use one of {list(SIZES)}")


def adamw(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """AdamW as GPU training loops run it ([training]: "the optimizer step is already fused by
    torch"; nanoGPT's `fused=True` on CUDA): one fused kernel per step on the GPU, the same for
    every mode; `foreach` elsewhere (and before 2026-11-27, on the GPU too: BENCHMARKS.md)."""
    params = list(params)
    fused = bool(params) and all(p.is_cuda for p in params)
    return torch.optim.AdamW(params, lr=1e-4, fused=fused, foreach=None if fused else True)
