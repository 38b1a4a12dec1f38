"""Code generation: kernel specs, lowering of subgraphs to templates, Triton rendering, build.

Public API: `KernelSpec`, `RenderedKernel`, `IllegalSpec`, `Unsupported`, `lower(subgraph)`,
`knob_space(spec)`, `render(spec)`, `build(spec)`.
Must not: measure, search or cache (runtime/, search/ and cache own those).
"""

from .build import SpecKernel, build
from .errors import IllegalSpec, Unsupported
from .knobs import knob_space
from .lower import lower
from .render import render
from .spec import KernelSpec, RenderedKernel

__all__ = [
    "IllegalSpec",
    "KernelSpec",
    "RenderedKernel",
    "SpecKernel",
    "Unsupported",
    "build",
    "knob_space",
    "lower",
    "render",
]
