"""A CUTLASS convolution library's host side: calling a library built from
codegen/templates/cutlass_conv.py on torch tensors.

Owns: `HostConv` (one operator's library, loaded; called with torch's conv2d arguments in
torch's shapes, channels-last memory, it checks the layouts and writes the result),
`ConvProblem` (a forward convolution's sizes as the entry points take them) and
`library_conv` (a source's HostConv on the current GPU, built now if the cache lacks it).
Must not: build libraries (host.py's `compile_library`) or decide when a subgraph is a
convolution (lowering).
"""

from __future__ import annotations

import ctypes
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..errors import CandidateLoadError
from .host import _LIBRARY_DIR, RUN_ERRORS, current_library

_LOADED: dict[tuple[str, str, Path | None], HostConv] = {}  # by source, operator, library dir
_SYMBOLS = ("kp_conv_workspace", "kp_conv_run")  # HostConv calls these

_CL = torch.channels_last


@dataclasses.dataclass(frozen=True)
class ConvProblem:
    """x [n, c, h, w] conv w [k, c, r, s] (torch's shapes), groups 1."""

    n: int
    h: int
    w: int
    c: int
    k: int
    r: int
    s: int
    padding: tuple[int, int] = (0, 0)
    stride: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)

    @classmethod
    def of(
        cls, x_shape: Any, w_shape: Any, padding: Any, stride: Any, dilation: Any
    ) -> ConvProblem:
        (n, c, h, w), (k, c2, r, s) = x_shape, w_shape
        if c2 != c:
            raise CandidateLoadError(f"grouped convolution ({c} channels, weight {c2}): dense only")
        return cls(n, h, w, c, k, r, s, tuple(padding), tuple(stride), tuple(dilation))

    @classmethod
    def from_args(cls, args: Sequence[int]) -> ConvProblem:
        """The inverse of `args()`."""
        n, h, w, c, k, r, s, ph, pw, sh, sw, dh, dw = (int(v) for v in args)
        return cls(n, h, w, c, k, r, s, (ph, pw), (sh, sw), (dh, dw))

    def result_shape(self, operator: str) -> tuple[int, int, int, int]:
        """The shape (torch's) of what `operator` computes: y, dx or dw."""
        p, q = self.output_hw
        return {
            "fprop": (self.n, self.k, p, q),
            "dgrad": (self.n, self.c, self.h, self.w),
            "wgrad": (self.k, self.c, self.r, self.s),
        }[operator]

    @property
    def output_hw(self) -> tuple[int, int]:
        (ph, pw), (sh, sw), (dh, dw) = self.padding, self.stride, self.dilation
        p = (self.h + 2 * ph - dh * (self.r - 1) - 1) // sh + 1
        q = (self.w + 2 * pw - dw * (self.s - 1) - 1) // sw + 1
        return p, q

    def args(self) -> tuple[int, ...]:
        return (
            self.n, self.h, self.w, self.c, self.k, self.r, self.s, *self.padding,
            *self.stride, *self.dilation,
        )  # fmt: skip


def _channels_last(t: torch.Tensor, name: str) -> None:
    if t.dim() != 4 or not t.is_contiguous(memory_format=_CL):
        raise CandidateLoadError(
            f"{name} must be a packed channels-last 4-D tensor, shape {tuple(t.shape)} strides "
            f"{t.stride()}"
        )


class HostConv:
    """One operator of a codegen/templates/cutlass_conv.py library: `fprop(x, w)` -> y,
    `dgrad(dy, w)` -> dx, `wgrad(dy, x)` -> dw, as the library was built (`operator`)."""

    def __init__(self, library: Path, operator: str) -> None:
        self.library = ctypes.CDLL(str(library))
        self.operator = operator
        i32, ptr = ctypes.c_int, ctypes.c_void_p
        self._run = self.library.kp_conv_run
        self._run.restype = i32
        self._run.argtypes = [ptr] * 3 + [i32] * 13 + [ptr, i32, ptr]
        self._workspace_size = self.library.kp_conv_workspace
        self._workspace_size.restype = ctypes.c_size_t
        self._workspace_size.argtypes = [i32] * 14
        self._workspaces: dict[tuple[ConvProblem, Any], torch.Tensor] = {}

    def __call__(self, act: torch.Tensor, flt: torch.Tensor, problem: ConvProblem) -> torch.Tensor:
        """The operator's result (torch's shape, channels-last) for operands as the module
        docstring of codegen/templates/cutlass_conv.py lists them, in torch's shapes."""
        _channels_last(act, "act")
        _channels_last(flt, "flt")
        if self.operator == "dgrad" and problem.stride != (1, 1):
            raise CandidateLoadError(
                f"stride {problem.stride}: CUTLASS's Hopper input gradient loads dy in im2col "
                "mode, which covers unit strides only (a strided one is its sm100 kernel's)"
            )
        shape = problem.result_shape(self.operator)
        out = torch.empty(shape, dtype=act.dtype, device=act.device, memory_format=_CL)
        sms = torch.cuda.get_device_properties(act.device).multi_processor_count
        workspace = self._workspace(problem, sms, act.device)
        stream = torch.cuda.current_stream(act.device).cuda_stream
        code = self._run(
            act.data_ptr(), flt.data_ptr(), out.data_ptr(), *problem.args(),
            workspace.data_ptr() if workspace.numel() else None, sms, stream,
        )  # fmt: skip
        if code:
            raise CandidateLoadError(f"kp_conv_run returned {code}: {RUN_ERRORS.get(code, '?')}")
        return out

    def _workspace(self, problem: ConvProblem, sms: int, device: Any) -> torch.Tensor:
        key = (problem, device)
        if key not in self._workspaces:
            size = int(self._workspace_size(*problem.args(), sms))
            self._workspaces[key] = torch.empty(size, dtype=torch.uint8, device=device)
        return self._workspaces[key]


def library_conv(source: str, operator: str) -> HostConv:
    """The HostConv of a codegen/templates/cutlass_conv.py source on the current GPU, its
    library built now if the cache lacks it (a minute or two: searches propose only built
    ones, tuner/cutlass_builds.py)."""
    key = (source, operator, _LIBRARY_DIR[0])
    if key not in _LOADED:  # checked before anything else: the timed call lands here
        _LOADED[key] = HostConv(current_library(source, _SYMBOLS, "convolution"), operator)
    return _LOADED[key]
