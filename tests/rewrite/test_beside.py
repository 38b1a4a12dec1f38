"""A second compile standing in for the first (rewrite/beside.py): outputs the second lays at
other strides than the first reported are copied to the first's; symbolic ones are refused."""

from __future__ import annotations

import pytest
import torch
from torch._guards import TracingContext, tracing

from kernelpro_backend.rewrite.beside import compile_beside


def _compiled(layouts):  # type: ignore[no-untyped-def]
    """A boxed 'compiled graph' returning x + 1 at each given memory format, and reporting
    the outputs' strides to the tracing context as Inductor does."""

    def compile_graph():  # type: ignore[no-untyped-def]
        context = TracingContext.try_get()
        example = torch.empty(2, 3, 4, 5)
        for fmt in layouts:
            context.output_strides.append(example.contiguous(memory_format=fmt).stride())

        def run(args):  # type: ignore[no-untyped-def]
            (x,) = args
            return [(x + 1).contiguous(memory_format=fmt) for fmt in layouts]

        return run

    return compile_graph


def test_an_output_laid_otherwise_is_copied_to_the_first_compiles_strides():
    """As in ConvNeXt-T's channels-last forward (H100): the second compile laid one output
    NHWC where the first had reported NCHW; AOTAutograd expects the first's."""
    nchw, nhwc = torch.contiguous_format, torch.channels_last
    context = TracingContext(None)
    context.output_strides = []
    with tracing(context):
        first = _compiled([nchw, nchw])()
        second = compile_beside(_compiled([nchw, nhwc]))
        assert context.output_strides == [(60, 20, 5, 1), (60, 20, 5, 1)]
    x = torch.randn(2, 3, 4, 5)
    want, got = first([x]), second([x])
    assert [o.stride() for o in got] == [o.stride() for o in want]
    for a, b in zip(want, got, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_second_compile_laid_alike_is_returned_as_it_is():
    context = TracingContext(None)
    context.output_strides = []
    compile_graph = _compiled([torch.channels_last])
    with tracing(context):
        compile_graph()
        second = compile_beside(compile_graph)
    assert not hasattr(second, "fix")


def test_strides_that_are_not_plain_integers_are_refused():
    context = TracingContext(None)
    context.output_strides = [("s0", 1)]

    def compile_graph():  # type: ignore[no-untyped-def]
        context.output_strides.append((7, 1))
        return lambda args: args

    with tracing(context), pytest.raises(RuntimeError, match="not plain integers"):
        compile_beside(compile_graph)
    assert context.output_strides == [("s0", 1)]  # the first report stays
