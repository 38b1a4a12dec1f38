"""Building a spec into a callable kernel.

Owns: rendering, executing the module source in a fresh namespace (written to a file named by
the sha256 of its content in the private per-user directory `paths.codegen_dir()`, so Triton's
JIT can read the kernel's source), and wrapping `entry` as a `Kernel`. A file already there is
imported only if its bytes are the source about to run; anything else is rewritten first.
Must not: validate numerics or time anything (runtime/ does), or import from a directory other
users can write to.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from ..paths import atomic_write, codegen_dir
from .render import render
from .spec import KernelSpec, RenderedKernel

# Compiles CUDA C++ source and returns the callable that launches its entry (the runtime's
# driver loader; codegen does not import the runtime).
CudaLoader = Callable[[str, str], Callable[..., Sequence[torch.Tensor]]]


def module_file(source: str, directory: Path | None = None) -> Path:
    """The file that holds `source` for import: kp_<sha256 of it>.py in `directory` (default
    the private codegen_dir()), (re)written unless it already holds exactly these bytes."""
    data = source.encode()
    digest = hashlib.sha256(data).hexdigest()[:24]
    path = (codegen_dir() if directory is None else directory) / f"kp_{digest}.py"
    try:
        same = path.read_bytes() == data
    except OSError:
        same = False
    if not same:  # missing, stale or planted: what runs is what we rendered
        atomic_write(path, data, mode=0o600)
    return path


def load_module(rendered: RenderedKernel) -> Callable[..., list[torch.Tensor]]:
    """Execute `rendered.source` as a fresh module and return its entry function. The source
    goes to a file named by its hash: `@triton.jit` reads kernel source with `inspect`."""
    path = module_file(rendered.source)
    digest = path.stem[len("kp_") :]
    name = f"kernelpro_generated_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load generated module {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    entry = getattr(module, rendered.entry, None)
    if entry is None:
        raise ImportError(f"generated module {path} defines no {rendered.entry!r}")
    return entry  # type: ignore[no-any-return]


class CudaSpecKernel:
    """A `Kernel` from a spec rendered as CUDA C++ ("row_cluster"): compiled with nvcc (or
    NVRTC) into the cubin cache, loaded and launched through the driver API. Not traceable:
    it runs behind kernelpro's launch op, as free-form CUDA candidates do."""

    def __init__(self, spec: KernelSpec, rendered: RenderedKernel, load_cuda: CudaLoader) -> None:
        self.spec, self.rendered = spec, rendered
        self.name = f"{spec.template}-{spec.digest[:12]}"
        self._kernel = load_cuda(rendered.source, rendered.entry)

    def __call__(self, *inputs: torch.Tensor) -> Sequence[torch.Tensor]:
        if len(inputs) != len(self.spec.inputs):
            raise TypeError(f"{self.name} takes {len(self.spec.inputs)} inputs, got {len(inputs)}")
        return self._kernel(*inputs)


class SpecKernel:
    """A `Kernel` built from a spec: `kernel(*inputs)` returns fresh outputs."""

    def __init__(self, spec: KernelSpec, rendered: RenderedKernel | None = None) -> None:
        self.spec = spec
        self.rendered = render(spec) if rendered is None else rendered
        self.name = f"{spec.template}-{spec.digest[:12]}"
        self._entry = load_module(self.rendered)

    @property
    def precompiles(self) -> bool:
        """Whether the module has Triton kernels to compile ahead and nothing else to run: a
        library call's entry would run the call (templates/library.launches_only)."""
        if self.spec.template == "gemm_library":
            from .templates.library import launches_only

            return launches_only(self.spec)
        if self.spec.template == "gemm_cutlass":  # a shared library's call, no Triton kernel
            return False
        return "@triton.jit" in self.rendered.source

    @property
    def entry(self) -> Callable[..., list[torch.Tensor]]:
        """The generated module's entry function; its globals hold the @triton.jit kernels
        (the profilers find the compiled ones there)."""
        return self._entry

    def __call__(self, *inputs: torch.Tensor) -> Sequence[torch.Tensor]:
        if len(inputs) != len(self.spec.inputs):
            raise TypeError(f"{self.name} takes {len(self.spec.inputs)} inputs, got {len(inputs)}")
        return self._entry(*inputs)

    def traceable(self) -> Callable[..., Sequence[torch.Tensor]]:
        """The entry with every launch wrapped by `torch.library.wrap_triton`, so that tracing
        it (make_fx under functionalization) records the kernels as graph nodes that Inductor
        launches from its own generated code (rewrite/graph.py inlines them)."""
        from torch.library import wrap_triton

        return functools.partial(self._entry, _launch=wrap_triton)


def build(
    spec: KernelSpec,
    rendered: RenderedKernel | None = None,
    *,
    load_cuda: CudaLoader | None = None,
) -> SpecKernel | CudaSpecKernel:
    """The kernel for `spec`; `rendered`: use this source (a cached, proved one) instead of
    rendering the spec with today's templates. A CUDA rendering is compiled and loaded by
    `load_cuda(source, entry)` (runtime.spec_kernel.build_kernel passes the driver's)."""
    rendered = render(spec) if rendered is None else rendered
    if rendered.language == "cuda":
        if load_cuda is None:
            raise TypeError(
                f"{spec.template} renders CUDA C++; build it with "
                "kernelpro_backend.runtime.spec_kernel.build_kernel (it compiles and loads it)"
            )
        return CudaSpecKernel(spec, rendered, load_cuda)
    return SpecKernel(spec, rendered)
