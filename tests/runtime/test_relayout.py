"""A candidate is timed with the copies its graph makes around it (runtime/relayout.py): in a
channels-last graph Inductor hands a served kernel its NHWC activations copied to the aten
graph's NCHW strides, and copies an output a convolution reads back to NHWC. The Inductor
baseline, already timed with the graph's layout (fallback.py), is not charged them. CPU: the
graphs are traced with oneDNN off, so Inductor's CUDA layout rule decides, as on a GPU."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import torch
from runtime_helpers import subgraphs_of

from kernelpro_backend.backend import make_backend
from kernelpro_backend.runtime import BaselineCandidate, EvalStatus, Job, relayout
from kernelpro_backend.runtime import worker as worker_module
from kernelpro_backend.runtime.fallback import FallbackSettings
from kernelpro_backend.runtime.relayout import copy_bytes, in_graph_call
from kernelpro_backend.runtime.worker import WorkerState, evaluate_job

NCHW = ((2, 16, 8, 8), (1024, 64, 8, 1), "float32")
NHWC = ((2, 16, 8, 8), (1024, 1, 128, 16), "float32")


def _chain_jobs() -> tuple[Job, Job]:
    model = torch.nn.Sequential(
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3, padding=1)
    )
    torch._dynamo.reset()
    with torch.no_grad(), torch.backends.mkldnn.flags(enabled=False):
        found = [s for s in subgraphs_of(model, torch.randn(2, 8, 8, 8)) if s.kind == "conv"]
        first, second = found
        return (
            Job.from_subgraph(first, BaselineCandidate("eager")),
            Job.from_subgraph(second, BaselineCandidate("eager")),
        )


def test_an_output_a_convolution_reads_is_needed_channels_last():
    one, two = _chain_jobs()
    # conv+relu's output feeds the next conv: the graph needs it NHWC from a kernel
    assert one.output_meta == (NCHW,)
    assert one.fallback.graph_output_meta == (NHWC,)
    # the last conv's output is the graph's: wanted at its own strides
    assert two.fallback.graph_output_meta is None
    assert two.fallback.graph_input_meta is not None and NHWC in two.fallback.graph_input_meta


def test_an_output_that_reaches_a_convolution_through_other_ops_is_needed_channels_last():
    """conv -> max-pool -> conv: Inductor lays the first conv's output NHWC though no
    convolution reads it (its channels-last set holds what feeds a convolution's input, however
    far), so a kernel's NCHW output is copied there; before, only a reading conv counted."""
    model = torch.nn.Sequential(
        torch.nn.Conv2d(8, 16, 3, padding=1),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 16, 3, padding=1),
    )
    torch._dynamo.reset()
    with torch.no_grad(), torch.backends.mkldnn.flags(enabled=False):
        found = [s for s in subgraphs_of(model, torch.randn(2, 8, 8, 8)) if s.kind == "conv"]
        first = Job.from_subgraph(found[0], BaselineCandidate("eager"))
    assert first.output_meta == (NCHW,)
    assert first.fallback.graph_output_meta == (NHWC,)


def test_the_kernel_gets_its_own_strides_and_the_graph_its_layout():
    seen = []

    def kernel(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        seen.append((x.stride(), w.stride()))
        return x * 2 + w

    weight = ((2, 16, 8, 8), (1024, 64, 8, 1), "float32")
    fallback = FallbackSettings(graph_input_meta=(NHWC, weight), graph_output_meta=(NHWC,))
    call = in_graph_call(kernel, (NCHW, weight), (NCHW,), fallback)
    x = torch.randn(2, 16, 8, 8).contiguous(memory_format=torch.channels_last)
    w = torch.randn(2, 16, 8, 8)
    out = call(x, w)
    assert seen == [(NCHW[1], weight[1])]
    assert out.stride() == NHWC[1]
    torch.testing.assert_close(out, x * 2 + w, rtol=0, atol=0)


def test_no_copy_no_wrapper():
    kernel = torch.relu
    assert in_graph_call(kernel, (NCHW,), (NCHW,), FallbackSettings()) is kernel
    same = FallbackSettings(graph_input_meta=(NCHW,), graph_output_meta=(NCHW,))
    assert in_graph_call(kernel, (NCHW,), (NCHW,), same) is kernel


def test_a_tuple_of_outputs_keeps_its_type_and_order():
    fallback = FallbackSettings(graph_output_meta=(NCHW, NHWC))
    call = in_graph_call(lambda x: (x + 1, x - 1), (NCHW,), (NCHW, NCHW), fallback)
    x = torch.randn(2, 16, 8, 8)
    a, b = call(x)
    assert a.stride() == NCHW[1] and b.stride() == NHWC[1]
    torch.testing.assert_close(b, x - 1, rtol=0, atol=0)


def _timed_strides(monkeypatch, job: Job) -> tuple[list, dict]:
    """The strides the kernel saw in the worker's timed calls, and the result's details."""
    seen: list = []
    real = worker_module.load_kernel

    def spy(candidate, reference, workdir, **kwargs):
        inner = real(BaselineCandidate("eager"), reference, workdir)

        def kernel(*xs):
            seen.append(tuple(x.stride() for x in xs))
            return inner(*xs)

        return kernel

    monkeypatch.setattr(worker_module, "load_kernel", spy)
    monkeypatch.setattr(worker_module, "validate", lambda *a: (None, {}))
    state = WorkerState(Path(tempfile.mkdtemp(prefix="kernelpro-test-")))
    result = evaluate_job(job, state)
    assert result.status is EvalStatus.OK, result.message
    return seen, result.details


def test_the_worker_times_a_candidate_with_its_graphs_copies(monkeypatch):
    _, two = _chain_jobs()
    copied = []
    monkeypatch.setattr(relayout, "in_graph_call", _counting(copied))
    seen, details = _timed_strides(monkeypatch, two)
    assert details["in_graph_copies"] is True
    assert copied == [two.fallback]
    activation = two.input_meta.index(NCHW)
    assert seen and all(s[activation] == NCHW[1] for s in seen)  # the kernel's own strides


def test_the_inductor_baseline_is_timed_as_itself(monkeypatch):
    _, two = _chain_jobs()
    _, inductor = two.baselines()
    seen, details = _timed_strides(monkeypatch, inductor)
    assert "in_graph_copies" not in details
    activation = two.input_meta.index(NCHW)
    assert seen and all(s[activation] == NHWC[1] for s in seen)  # laid as in the graph


def test_a_job_outside_a_graph_is_timed_unwrapped(monkeypatch):
    _, two = _chain_jobs()
    alone = dataclasses.replace(two, fallback=FallbackSettings())
    seen, details = _timed_strides(monkeypatch, alone)
    assert "in_graph_copies" not in details
    assert seen and all(s[two.input_meta.index(NCHW)] == NCHW[1] for s in seen)


def _counting(calls: list):
    real = relayout.in_graph_call

    def counted(kernel, inputs, outputs, fallback):
        calls.append(fallback)
        return real(kernel, inputs, outputs, fallback)

    return counted


def test_an_eager_graph_makes_no_copies():
    _, two = _chain_jobs()
    assert two.for_fallback("inductor") is two
    eager = two.for_fallback("eager")
    assert eager.fallback.graph_input_meta is None and eager.fallback.graph_output_meta is None
    assert eager.fallback.inductor == two.fallback.inductor
    assert [b.input_meta for b in eager.baselines()] == [two.input_meta] * 2


def test_the_copies_bytes_are_each_copied_tensor_read_and_written():
    one, two = _chain_jobs()
    activation = 2 * 16 * 8 * 8 * 4
    # the second conv's NHWC activation copied in; the first's output copied out for the next
    assert copy_bytes(two.input_meta, two.output_meta, two.fallback) == 2 * activation
    assert copy_bytes(one.input_meta, one.output_meta, one.fallback) == 2 * activation
    assert copy_bytes(two.input_meta, two.output_meta, FallbackSettings()) == 0


def test_a_training_steps_forward_is_charged_its_copies_and_its_backward_none():
    """Inductor decides the layout per graph: the forward of conv -> BatchNorm -> ReLU -> conv
    goes channels-last, the backward (no aten.convolution in it) does not."""
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 128, 3, padding=1),
        torch.nn.BatchNorm2d(128),
        torch.nn.ReLU(),
        torch.nn.Conv2d(128, 128, 3, padding=1),
    )
    found: list = []
    backend = make_backend(observer=lambda kind, sgs: found.extend(sgs))
    torch._dynamo.reset()
    with torch.backends.mkldnn.flags(enabled=False):
        step = torch.compile(model, backend=backend, options={"fallback": "eager", "search": "off"})
        step(torch.randn(2, 3, 8, 8)).sum().backward()
        charged = {
            (sg.graph, sg.kind): copy_bytes(sg.input_meta, sg.output_meta, FallbackSettings.of(sg))
            > 0
            for sg in found
        }
    assert any(charged[k] for k in charged if k[0] == "forward")
    assert ("backward", "conv") in charged
    assert not any(charged[k] for k in charged if k[0] == "backward")
