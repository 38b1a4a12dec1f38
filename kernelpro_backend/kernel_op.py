"""The opaque op that launches a provided kernel, and the registry it launches from.

Owns: `torch.ops.kernelpro.launch(kernel_id, inputs) -> outputs`, a `torch.library` custom op
with a fake implementation (so Inductor and AOTAutograd treat it as a black box), and the
in-process registry that maps kernel ids to kernels and their output metadata.
Must not: choose kernels or edit graphs (rewrite.py does).
"""

from __future__ import annotations

import dataclasses
import threading

import torch

from .providers import Kernel, TensorMeta, conform


@dataclasses.dataclass
class RegisteredKernel:
    kernel: Kernel
    outputs: list[TensorMeta]  # (shape, stride, dtype) per output, canonical order
    device_type: str
    calls: int = 0


class KernelRegistry:
    """Kernel id -> kernel. Ids are deterministic (subgraph key + kernel name), so a graph that
    Inductor's FX cache hands back in a later process finds its kernels once the backend has
    registered them during that process's own compile."""

    def __init__(self) -> None:
        self._entries: dict[str, RegisteredKernel] = {}
        self._lock = threading.Lock()

    def register(self, kernel_id: str, entry: RegisteredKernel) -> None:
        with self._lock:
            self._entries[kernel_id] = entry

    def get(self, kernel_id: str) -> RegisteredKernel:
        try:
            return self._entries[kernel_id]
        except KeyError:
            raise RuntimeError(
                f"kernelpro kernel {kernel_id!r} is not registered in this process; this happens "
                "when a compiled graph is loaded without going through backend='kernelpro'. "
                "Recompile the model with torch.compile(..., backend='kernelpro')."
            ) from None

    def calls(self, kernel_id: str) -> int:
        return self._entries[kernel_id].calls

    def __contains__(self, kernel_id: str) -> bool:
        return kernel_id in self._entries


KERNELS = KernelRegistry()


@torch.library.custom_op("kernelpro::launch", mutates_args=())
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
