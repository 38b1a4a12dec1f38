"""kernelpro's custom operators, registered with the dispatcher directly (`Library.define` +
`impl`) instead of through `torch.library.custom_op`.

A `custom_op` call walks Python wrappers on several dispatch keys (autograd, the backend with
its output-aliasing check); on the GPU machine's torch 2.11 the backend wrapper took ~350 µs of
host time per call of the LM-head op inside a compiled training step (cProfile; called eagerly,
40-100 µs more than the op's body alone; BENCHMARKS.md, "The LM-head verdict on the GPU, the
op's host path, ..."), and every replaced subgraph's launch paid a wrapper too. Here the body is the one kernel of every
backend (CompositeExplicitAutograd), the fake implementation is the Meta/fake kernel, and an
autograd formula, where one is given, is `torch.library.register_autograd`'s. The outputs'
freshness, which custom_op checks on every call, is each op's own contract (rewrite/launch.conform,
the LM-head op's fresh empty tensors). An op without a formula (launch, dispatch, cutlass_gemm:
they run inside graphs AOTAutograd has already differentiated) has no autograd kernel: called
with grad mode on and inputs that require grad, PyTorch's autograd fallback warns ("an autograd
kernel was not registered") where custom_op raised.

Owns: `fast_op(qualname)`, the decorator the ops use, and the `kernelpro` library fragment.
Must not: implement any op.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

_LIB = torch.library.Library("kernelpro", "FRAGMENT")  # kept alive: it holds the registrations


class FastOp:
    """An operator `namespace::name` whose every backend runs `fn`; called like `fn`."""

    def __init__(self, qualname: str, fn: Callable[..., Any], mutates_args: Iterable[str]) -> None:
        namespace, name = qualname.split("::")
        if namespace != _LIB.ns:
            raise ValueError(f"fast_op registers kernelpro:: operators only, not {qualname!r}")
        schema = torch.library.infer_schema(fn, mutates_args=tuple(mutates_args))
        _LIB.define(name + schema)
        _LIB.impl(name, fn, "CompositeExplicitAutograd")
        self.qualname = qualname
        self._init_fn = fn  # the body, as custom_op names it (the host-cost script calls it)
        self._opoverload = getattr(getattr(torch.ops, namespace), name).default
        self.__doc__ = fn.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._opoverload(*args, **kwargs)

    def register_fake(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        torch.library.register_fake(self.qualname, fn, lib=_LIB)
        return fn

    def register_autograd(
        self, backward: Callable[..., Any], *, setup_context: Callable[..., Any]
    ) -> None:
        torch.library.register_autograd(
            self.qualname, backward, setup_context=setup_context, lib=_LIB
        )


def fast_op(qualname: str, *, mutates_args: Iterable[str] = ()) -> Callable[..., FastOp]:
    """`@fast_op("kernelpro::name")`: as `torch.library.custom_op`, for this package's ops."""
    return lambda fn: FastOp(qualname, fn, mutates_args)
