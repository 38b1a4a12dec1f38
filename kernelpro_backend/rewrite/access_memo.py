"""One access analysis per kernelpro kernel and argument signature, not one per call site.

A kernel inlined into the graph (rewrite/inline.py) becomes a Triton launch node at every site
it serves, and torch analyses each node on its own: functionalization asks which arguments the
kernel writes, Inductor asks which it reads and writes, and each question generates the
kernel's Triton IR and walks it (`torch._higher_order_ops.triton_kernel_wrap`). The answer
depends only on the kernel's source and its arguments' types and constant values, so a kernel
served at 24 sites of a step was analysed about 48 times for one answer (the warm-up's
in-context check compiled an hf_bert step in ~9 s without kernels and ~70 s with 2-4 kernels
served at 12-24 sites each; BENCHMARKS.md).

Owns: `install` (wraps torch's analysis once per process, answering from a memo for kernels
kernelpro generated; every other kernel goes to torch's analysis unchanged) and `uninstall`.
Must not: change an answer. The key holds the kernel's module, name and source and, per
argument, a tensor's dtype or a scalar's exact value; an argument of any other type is not
memoised (torch analyses that call itself).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any

import sympy
import torch

log = logging.getLogger("kernelpro.rewrite")

# Generated modules are named by codegen/build.py ("kernelpro_generated_<digest>") and
# runtime/candidate.py ("kernelpro_candidate_<digest>"); a user's own kernels are not ours.
_OURS = ("kernelpro_generated_", "kernelpro_candidate_")
# torch's entry point: `identify_accessed_tensors` in recent releases, `identify_mutated_tensors`
# (a list of written names) before.
_NAMES = ("identify_accessed_tensors", "identify_mutated_tensors")

_memo: dict[tuple[Any, ...], Any] = {}
_originals: dict[str, Callable[..., Any]] = {}
_said_absent: list[bool] = []  # the "nothing to memoise" line, once a process


def _kernel_key(kernel: Any) -> tuple[str, str, str] | None:
    fn = getattr(kernel, "fn", None)  # an Autotuner wraps its JITFunction
    jit = fn if hasattr(fn, "src") and not hasattr(kernel, "src") else kernel
    module, src = getattr(jit, "__module__", None), getattr(jit, "src", None)
    if not isinstance(module, str) or not module.startswith(_OURS) or not isinstance(src, str):
        return None
    return (module, getattr(jit, "__name__", ""), src)


def _arg_key(value: Any) -> tuple[Any, ...] | None:
    if isinstance(value, torch.Tensor):
        return ("tensor", value.dtype)
    get_dtype = getattr(value, "get_dtype", None)  # Inductor's TensorBox / buffers
    if callable(get_dtype):
        return ("tensor", get_dtype())
    if value is None or isinstance(value, (bool, int, float, str)):
        return (type(value).__name__, value)
    if isinstance(value, (torch.SymInt, sympy.Basic)):  # Inductor passes sizes as sympy
        return ("symbolic", str(value))
    return None


def _key(kernel: Any, kwargs: dict[str, Any], tma: Any) -> tuple[Any, ...] | None:
    kernel_key = _kernel_key(kernel)
    if kernel_key is None or not isinstance(kwargs, dict):
        return None
    args = []
    for name in sorted(kwargs):
        arg = _arg_key(kwargs[name])
        if arg is None:
            return None
        args.append((name, arg))
    try:
        tma_key = repr(sorted(tma.items())) if tma else ""
    except TypeError:
        return None
    return (kernel_key, tuple(args), tma_key)


def _memoised(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    def analyse(*args: Any, **kwargs: Any) -> Any:
        # torch calls it as (kernel, kwargs, tma_descriptor_metadata); any other call is passed on
        key = _key(*args) if len(args) == 3 and not kwargs else None
        if key is None:
            return original(*args, **kwargs)
        key = (name, *key)
        if key not in _memo:
            _memo[key] = original(*args)
        return copy.deepcopy(_memo[key])  # callers own their answer, as from torch

    analyse.__wrapped__ = original  # type: ignore[attr-defined]
    return analyse


def install() -> bool:
    """Wrap torch's analysis (idempotent); False, logged once, where torch has neither name."""
    try:
        from torch._higher_order_ops import triton_kernel_wrap as wrap
    except ImportError:
        return False
    done = False
    for name in _NAMES:
        current = getattr(wrap, name, None)
        if current is None:
            continue
        if name not in _originals:
            _originals[name] = current
            setattr(wrap, name, _memoised(name, current))
        done = True
    if not done and not _said_absent:
        _said_absent.append(True)
        log.info(
            "torch has no Triton access analysis to memoise; inlined kernels analysed per site"
        )
    return done


def uninstall() -> None:
    """torch's own analysis back, the memo emptied (tests, the compile-time probe)."""
    from torch._higher_order_ops import triton_kernel_wrap as wrap

    for name, original in _originals.items():
        setattr(wrap, name, original)
    _originals.clear()
    _memo.clear()
