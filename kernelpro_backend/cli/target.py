"""Resolving a MODULE:FN argument to the model and example inputs it returns.

Owns: `load_factory` and `model_and_inputs`, with the messages `explain` and `warmup` exit
with when the argument is wrong, and `--dynamic DIM=LOW:HIGH` ranges (`dynamic_sizes`,
`model_inputs_over`: the factory called with each size as a keyword argument).
Must not: compile or run the model.
"""

from __future__ import annotations

import importlib
import itertools
import sys
from collections.abc import Callable, Sequence
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


def dynamic_sizes(spec: str) -> tuple[str, list[int]]:
    """'seq=256:2048' -> ('seq', [256, 512, 1024, 2048]): LOW, every power of two between and
    HIGH (the bucket edges a dispatcher meets); 'seq=256,384,1000' -> the sizes listed."""
    name, sep, value = spec.partition("=")
    try:
        if not sep or not name.isidentifier():
            raise ValueError
        if ":" in value:
            low, high = (int(v) for v in value.split(":"))
            if not 0 < low <= high:
                raise ValueError
            powers = [
                1 << k for k in range(low.bit_length(), high.bit_length()) if low < 1 << k < high
            ]
            return name, sorted({low, *powers, high})
        sizes = sorted({int(v) for v in value.split(",")})
        if not sizes or sizes[0] <= 0:
            raise ValueError
        return name, sizes
    except ValueError:
        raise SystemExit(
            f"kernelpro: --dynamic expects DIM=LOW:HIGH or DIM=A,B,C with positive sizes and DIM "
            f"a keyword argument of the factory, got {spec!r}"
        ) from None


def model_inputs_over(
    spec: str, dynamic: Sequence[str]
) -> tuple[Any, tuple[Any, ...], list[tuple[Any, ...]]]:
    """(model, inputs at the first sizes, inputs at every other combination of sizes): FN is
    called as FN(DIM=size, ...) once per combination of the `dynamic` ranges; the model of the
    first call is the one warmed."""
    ranges = [dynamic_sizes(d) for d in dynamic]
    factory = load_factory(spec)
    names = [name for name, _ in ranges]
    model: Any = None
    shapes: list[tuple[Any, ...]] = []
    for combo in itertools.product(*(sizes for _, sizes in ranges)):
        try:
            result = factory(**dict(zip(names, combo, strict=True)))
        except TypeError as e:
            raise SystemExit(f"kernelpro: {spec} does not take {', '.join(names)} ({e})") from None
        if not (isinstance(result, (tuple, list)) and len(result) >= 2):
            raise SystemExit(f"kernelpro: {spec} must return (model, example_inputs)")
        model = result[0] if model is None else model
        shapes.append(_as_tuple(result[1]))
    return model, shapes[0], shapes[1:]
