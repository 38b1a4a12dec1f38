"""How a library model's training step is written by its users, shared by the corpus's factories.

Owns: the adapter (`LibraryStep`) that calls a library model with keyword arguments under the
step's autocast, the step's mixed-precision choice (`autocast_dtype`), the optimizer users pick
(`adamw`: fused on CUDA), the loss a library model returns (`returned_loss`), and the one-line
error for a missing optional package (`require`).
Must not: build models (the factories do) or time, compile and compare anything (the runner does).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterable
from types import ModuleType
from typing import Any

import torch
import torch.nn as nn

from ..workload import resolve_dtype

INSTALL_HINT = "pip install -e '.[models]'"


def require(package: str) -> ModuleType:
    """`package` imported, or an ImportError that names it and the extra that installs it."""
    try:
        return importlib.import_module(package)
    except ImportError as e:
        name = package.partition(".")[0]
        raise ImportError(
            f"this workload needs the `{name}` package, which is not importable here ({e}); "
            f"install the corpus's packages with `{INSTALL_HINT}`"
        ) from e


class LibraryStep(nn.Module):
    """A library model called as its users call it: `model(**dict(zip(names, inputs)))` inside
    `torch.autocast(device, dtype=autocast)` (None: no autocast), returning what the model returns
    (a ModelOutput: loss, logits, ...). The bench calls `step(*inputs)` with the inputs in
    `names`' order. Weights stay float32 under autocast, as in mixed-precision training."""

    def __init__(
        self,
        model: nn.Module,
        names: tuple[str, ...],
        device: torch.device,
        autocast: torch.dtype | None,
    ):
        super().__init__()
        self.model, self.names, self.autocast = model, names, autocast
        self.device_type = device.type

    def forward(self, *inputs: Any) -> Any:
        if len(inputs) != len(self.names):
            raise TypeError(f"expected the inputs {self.names}, got {len(inputs)} values")
        kwargs = dict(zip(self.names, inputs, strict=False))  # lengths checked above
        if self.autocast is None:
            return self.model(**kwargs)
        with torch.autocast(self.device_type, dtype=self.autocast):
            return self.model(**kwargs)

    def extra_repr(self) -> str:
        return f"names={self.names}, autocast={self.autocast}"


def autocast_dtype(device: torch.device, requested: torch.dtype | None) -> torch.dtype:
    """The dtype a transformers step computes in: the one asked for, else bf16 autocast on CUDA
    (as Hugging Face's Trainer runs `bf16=True`) and float32 on the CPU, where bf16 kernels are
    slow and a float32 step checks exactly."""
    return resolve_dtype(device, requested, torch.bfloat16)


def autocast_for(dtype: torch.dtype) -> torch.dtype | None:
    """The autocast dtype of a step computing in `dtype`: None (no autocast) for float32."""
    return None if dtype == torch.float32 else dtype


@contextlib.contextmanager
def seeded(device: torch.device, seed: int = 0) -> Any:
    """Weights built on `device` directly (a 0.5B-parameter model initialised on the host first
    takes tens of seconds), from a fixed seed so that every build of a workload is the same."""
    torch.manual_seed(seed)
    with torch.device(device):
        yield


def adamw(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """AdamW as users write it for a GPU: `fused=True` on CUDA (one kernel per step); torch's
    default implementation elsewhere."""
    params = list(params)
    fused = bool(params) and all(p.is_cuda for p in params)
    return torch.optim.AdamW(params, lr=1e-4, fused=fused or None)


def returned_loss(out: object) -> torch.Tensor:
    """The loss a library model computed from its `labels=` (`out.loss`, or `out["loss"]`)."""
    loss = getattr(out, "loss", None)
    if loss is None and isinstance(out, dict):
        loss = out.get("loss")
    if not isinstance(loss, torch.Tensor):
        raise TypeError(f"the model returned no loss tensor (got {type(out).__name__})")
    return loss
