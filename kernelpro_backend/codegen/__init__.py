"""Code generation: kernel specs, their knobs, Triton rendering, build.

Public API: `KernelSpec`, `RenderedKernel`, `IllegalSpec`, `Unsupported`, `KnobRole`,
`knob_roles(spec)`, `knob_space(spec)`, `render(spec)`, `build(spec)`.
Must not: read fx graphs (lowering/ turns a subgraph into a `KernelSpec` and imports this
package, never the other way), measure, search or cache (runtime/, search/ and cache own those).
"""

from .build import SpecKernel, build
from .errors import IllegalSpec, Unsupported
from .knobs import KnobRole, knob_roles, knob_space
from .render import render
from .spec import KernelSpec, RenderedKernel

__all__ = [
    "IllegalSpec",
    "KernelSpec",
    "KnobRole",
    "RenderedKernel",
    "SpecKernel",
    "Unsupported",
    "build",
    "knob_roles",
    "knob_space",
    "render",
]
