"""What a micro-profiling tool looks at and what it must provide.

Owns: `ProfileTarget` (what a tool may look at: the callable and its inputs, its knobs, the
compiled Triton kernels or a cubin, an ncu command line), the `Tool` protocol (name, the
bottleneck classes it applies to, its cost in seconds, `run(target) -> list[Finding]`) and
`ALL_CLASSES`.
Must not: know which tools exist (tools.py registers them); the tools import this module, the
registry imports the tools.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from .findings import Bottleneck, Finding

ALL_CLASSES = frozenset(Bottleneck)


@dataclasses.dataclass
class ProfileTarget:
    """One kernel (or a callable that launches one) to profile.

    `compiled`: Triton `CompiledKernel`s (anything with `.asm`, `.n_regs`, `.n_spills`,
    `.metadata`); found automatically from `fn` when left empty. `ncu_command`: an argv that
    runs the kernel under `cudaProfilerStart/Stop` (see ncu_launcher); built from `fn` and
    `inputs` by pickling when left empty."""

    fn: Callable[..., Any] | None = None
    inputs: Sequence[Any] = ()
    knobs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    kernel_name: str | None = None  # regex on the kernel name for ncu; None: the first launch
    compiled: Sequence[Any] = ()
    cubin: bytes | None = None
    ptxas_report: str | None = None  # `ptxas -v` text, e.g. from an nvcc build
    ncu_command: Sequence[str] | None = None
    ncu_run_timeout_s: float = 120.0  # seconds one ncu run may take (Options.ncu_run_timeout_s)
    element_bytes: int = 4  # of the main dtype: sets the ideal load width
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)  # run_tools: per tool


class Tool(Protocol):
    name: str
    applies_to: frozenset[Bottleneck]
    cost_s: float  # typical wall time of one run, so a budget can skip the expensive ones

    def available(self) -> str | None:
        """None when the tool can run here, else why not (one line)."""
        ...

    def run(self, target: ProfileTarget) -> list[Finding]: ...
