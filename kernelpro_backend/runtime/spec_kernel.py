"""Building a spec's kernel in whichever language its template renders to.

Owns: `build_kernel(spec, rendered, cubin_dir=, nvcc_timeout_s=)`: codegen's `build` with the
driver's CUDA loader, so a CUDA C++ template ("row_cluster") is compiled with nvcc (cubins
cached in `cubin_dir`) and launched through the driver API; Triton specs build as in codegen.
Must not: render (codegen does) or validate and time (the worker does).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..codegen import KernelSpec, RenderedKernel
    from ..codegen.build import CudaSpecKernel, SpecKernel


def build_kernel(
    spec: KernelSpec,
    rendered: RenderedKernel | None = None,
    *,
    cubin_dir: Path | None = None,
    nvcc_timeout_s: float | None = None,
) -> SpecKernel | CudaSpecKernel:
    """The kernel of `spec` (`rendered`: a stored source instead of today's rendering)."""
    from ..codegen import build
    from .cuda.driver import load_cuda_source

    load = functools.partial(load_cuda_source, cubin_dir=cubin_dir, timeout_s=nvcc_timeout_s)
    return build(spec, rendered, load_cuda=load)
