"""Code generation: kernel specs, their knobs, Triton rendering, build.

Public API: `KernelSpec`, `RenderedKernel`, `IllegalSpec`, `Unsupported`, `KnobRole`,
`knob_roles(spec)`, `knob_space(spec)`, `render(spec)`, `build(spec)`, `alternatives(seed)`,
`seed_configs(seed)`,
`host_surcharge_ms(spec, gpu_ms)`, `spec_note(spec)`.
Must not: read fx graphs (lowering/ turns a subgraph into a `KernelSpec` and imports this
package, never the other way), measure, search or cache (runtime/, search/ and cache own those).
"""

from .build import SpecKernel, build
from .cutlass_match import host_surcharge_ms
from .defaults import alternatives, seed_configs
from .errors import IllegalSpec, Unsupported
from .knobs import KnobRole, knob_roles, knob_space
from .render import render
from .spec import CUDA_TEMPLATES, KernelSpec, RenderedKernel
from .templates.padded import spec_note

__all__ = [
    "CUDA_TEMPLATES",
    "IllegalSpec",
    "KernelSpec",
    "KnobRole",
    "RenderedKernel",
    "SpecKernel",
    "Unsupported",
    "alternatives",
    "build",
    "host_surcharge_ms",
    "knob_roles",
    "knob_space",
    "render",
    "seed_configs",
    "spec_note",
]
