"""The opaque op that launches a provided kernel, and the registry it launches from.

Owns: `torch.ops.kernelpro.launch(kernel_id, inputs) -> outputs`, a `torch.library` custom op
with a fake implementation (so Inductor and AOTAutograd treat it as a black box), and the
in-process registry that maps kernel ids to kernels and their output metadata.
Must not: choose kernels or edit graphs (graph.py does).
"""

from __future__ import annotations

import dataclasses

import torch

from ..ops.fast_op import fast_op
from .providers import Kernel, Registry, TensorMeta, conform


@dataclasses.dataclass
class RegisteredKernel:
    kernel: Kernel
    outputs: list[TensorMeta]  # (shape, stride, dtype) per output, canonical order
    device_type: str
    calls: int = 0


class KernelRegistry(Registry[RegisteredKernel]):
    """Kernel id (subgraph key + kernel name) -> kernel, with its call count."""

    def __init__(self) -> None:
        super().__init__(
            "kernel",
            "this happens when a compiled graph is loaded without going through "
            "backend='kernelpro'. Recompile the model with torch.compile(..., "
            "backend='kernelpro').",
        )

    def calls(self, kernel_id: str) -> int:
        return self.get(kernel_id).calls


KERNELS = KernelRegistry()


@fast_op("kernelpro::launch")
def launch(kernel_id: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    entry = KERNELS.get(kernel_id)
    entry.calls += 1
    outs = entry.kernel(*inputs)
    if len(outs) != len(entry.outputs):
        raise RuntimeError(
            f"kernel {kernel_id!r} returned {len(outs)} outputs, expected {len(entry.outputs)}"
        )
    taken = {x.untyped_storage().data_ptr() for x in inputs}
    return [conform(o, m, taken) for o, m in zip(outs, entry.outputs, strict=True)]


@launch.register_fake
def _launch_fake(kernel_id: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    entry = KERNELS.get(kernel_id)
    device = inputs[0].device if inputs else torch.device(entry.device_type)
    return [
        torch.empty_strided(shape, stride, dtype=getattr(torch, dt), device=device)
        for shape, stride, dt in entry.outputs
    ]
