"""Resolving a MODULE:FN argument to the model and example inputs it returns.

Owns: `load_factory` and `model_and_inputs`, with the messages `explain` and `warmup` exit
with when the argument is wrong.
Must not: compile or run the model.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def load_factory(spec: str) -> Callable[[], Any]:
    """'package.module:function' -> the function (which returns (model, example_inputs))."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SystemExit(
            f"kernelpro: expected MODULE:FN (e.g. kernelpro_backend.examples:mlp), got {spec!r}"
        )
    sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise SystemExit(f"kernelpro: cannot import {module_name!r}: {e}") from None
    try:
        return getattr(module, attr)  # type: ignore[no-any-return]
    except AttributeError:
        raise SystemExit(f"kernelpro: module {module_name!r} has no attribute {attr!r}") from None


def model_and_inputs(spec: str) -> tuple[Any, tuple[Any, ...]]:
    model, inputs, _ = model_inputs_and_shapes(spec)
    return model, inputs


def model_inputs_and_shapes(spec: str) -> tuple[Any, tuple[Any, ...], list[tuple[Any, ...]]]:
    """(model, example inputs, example inputs at further shapes): FN returns (model, inputs)
    or (model, inputs, [inputs at another shape, ...]) for a warm-up over several shapes."""
    result = load_factory(spec)()
    if not (isinstance(result, (tuple, list)) and len(result) in (2, 3)):
        raise SystemExit(
            f"kernelpro: {spec} must return (model, example_inputs) or "
            "(model, example_inputs, [example_inputs at another shape, ...])"
        )
    model, inputs = result[0], _as_tuple(result[1])
    more = [_as_tuple(i) for i in result[2]] if len(result) == 3 else []
    return model, inputs, more


def _as_tuple(inputs: Any) -> tuple[Any, ...]:
    return tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
