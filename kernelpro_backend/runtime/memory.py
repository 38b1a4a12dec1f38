"""How many candidates of a subgraph fit on the GPU next to the user's own tensors.

Owns: `Footprint` (the bytes one evaluation needs: while it validates on the GPU, and while
it only compiles), `plan_memory(footprint, free_bytes, workers)` -> `MemoryPlan`, and
`gpu_free_bytes(device)`, which first returns the caller's cached allocator blocks.
Must not: allocate, evaluate or decide what to try.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch

TensorMeta = tuple[tuple[int, ...], tuple[int, ...], str]
GiB = 2**30
# A worker's CUDA context and Triton/Inductor scratch, and a margin for the allocator's
# rounding and fragmentation: what the estimate cannot see.
CONTEXT_BYTES = 768 * 2**20
HEADROOM = 0.9


def _bytes(meta: Sequence[TensorMeta], as_float64: bool = False) -> int:
    total = 0
    for shape, _, dtype in meta:
        dt = getattr(torch, dtype)
        size = 8 if as_float64 and dt.is_floating_point else dt.itemsize
        total += math.prod(shape) * size
    return total


@dataclasses.dataclass(frozen=True)
class Footprint:
    validate_bytes: int  # peak while proving: inputs, copies, float64 reference, outputs
    compile_bytes: int  # while precompiling: empty inputs and outputs of the real shapes
    native_bytes: int = 0  # peak while proving against the native-dtype reference only

    @classmethod
    def of(cls, input_meta: Sequence[TensorMeta], output_meta: Sequence[TensorMeta]) -> Footprint:
        """From the subgraph's tensors. Validation peaks either while the reference runs (the
        previous trial's inputs, this trial's and their scaled copy, their float64 upcast, the
        float64 output and an intermediate, the native reference output) or while the candidate runs (inputs and their saved copy, both
        references, and the candidate's outputs, their snapshot and a second run's outputs
        for the determinism check)."""
        ins, outs = _bytes(input_meta), _bytes(output_meta)
        ins64, outs64 = _bytes(input_meta, True), _bytes(output_meta, True)
        # trial 1 holds the previous inputs, fresh ones and their scaled copy; an aten op in
        # float64 may keep an intermediate of its output's size (log_softmax does); the
        # native output is held twice while it is compared (a 4096x262144 float32 softmax
        # peaked at 44.6 GiB in its worker on H100, 40.8 GiB without that second copy)
        reference = 3 * ins + ins64 + 2 * outs64 + 2 * outs
        candidate = 2 * ins + outs64 + outs + 3 * outs
        validate = max(reference, candidate) + CONTEXT_BYTES
        # without the float64 run: the inputs as above, the native output held twice; then the
        # inputs and their copy, the reference and three candidate outputs
        native = max(3 * ins + 2 * outs, 2 * ins + 4 * outs) + CONTEXT_BYTES
        return cls(validate, ins + outs + CONTEXT_BYTES, native)


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    concurrent: int  # evaluations in flight at once; 0: the search cannot run
    free_bytes: int
    footprint: Footprint
    exact: bool = True  # False: candidates are proved against the native-dtype reference

    @property
    def message(self) -> str:
        need = self.footprint.validate_bytes / GiB
        free = self.free_bytes / GiB
        if self.concurrent and not self.exact:
            return (
                f"a float64 reference needs {need:.1f} GiB, {free:.1f} GiB free: candidates "
                "are proved against PyTorch's result in the subgraph's own dtype"
            )
        least = min(need, (self.footprint.native_bytes or self.footprint.validate_bytes) / GiB)
        return f"needs {least:.1f} GiB to prove a candidate, {free:.1f} GiB free; kept the fallback"


def plan_memory(footprint: Footprint, free_bytes: int, workers: int) -> MemoryPlan:
    """One evaluation validates at a time (the pool's GPU lock); the others compile. So one
    fits when its validation peak fits in `free_bytes` (less a margin), and each more needs
    its compile footprint. Where the float64 reference does not fit and the native-dtype one
    does, candidates are proved against that (`exact` False)."""
    usable = int(free_bytes * HEADROOM)
    need, exact = footprint.validate_bytes, True
    if need > usable and 0 < footprint.native_bytes <= usable:
        need, exact = footprint.native_bytes, False
    if need > usable:
        return MemoryPlan(0, free_bytes, footprint)
    more = (usable - need) // max(1, footprint.compile_bytes)
    return MemoryPlan(max(1, min(workers, 1 + int(more))), free_bytes, footprint, exact)


def gpu_free_bytes(device: torch.device | str = "cuda") -> int:
    """Free device memory after returning the caller's cached (unused) allocator blocks."""
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info(torch.device(device))
    return int(free)
