"""The in-context verdict on CUDA, with device events: a graph whose kernels make it slower runs
the fallback's own graph after its turns, one whose kernels make it faster keeps them."""

from __future__ import annotations

import pytest
import torch

from kernelpro_backend import make_backend
from kernelpro_backend.backend import CompileSession
from kernelpro_backend.rewrite.judged import ROUNDS, WARMUP, DeviceClock, JudgedGraph
from kernelpro_backend.rewrite.providers import CallableKernel

pytestmark = pytest.mark.gpu

SLEEP_CYCLES = 2_000_000  # ~1 ms of the device's time at Hopper's clocks


def test_device_clock_picks_the_faster_variant():
    x = torch.randn(1024, 1024, device="cuda")

    def fast(args):
        return [args[0] * 2]

    def slow(args):
        torch.cuda._sleep(SLEEP_CYCLES)
        return [args[0] * 2]

    for with_kernels, without, keep in ((fast, slow, True), (slow, fast, False)):
        verdicts: list = []
        graph = JudgedGraph(with_kernels, without, DeviceClock(), verdicts.append)
        for _ in range(2 * (WARMUP + ROUNDS)):
            torch.testing.assert_close(graph([x])[0], x * 2)
        assert graph.settled and verdicts[0].keep is keep
        assert verdicts[0].without_median > 0 and verdicts[0].with_median > 0


class SlowKernels:
    """Each subgraph's own reference plus ~1 ms of device sleep: correct, and slower in
    context than anything the fallback compiles."""

    def find(self, subgraph):
        module = subgraph.module()

        def run(*args):
            torch.cuda._sleep(SLEEP_CYCLES)
            return module(*args)

        return CallableKernel("slow", run)


@pytest.mark.parametrize("fallback", ["inductor", "eager"])
def test_slower_kernels_are_dropped_in_context(fallback):
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU()).cuda()
    x = torch.randn(64, 256, device="cuda")
    sessions: list[CompileSession] = []
    compiled = torch.compile(
        model,
        backend=make_backend(provider=SlowKernels(), sessions=sessions),
        options={"fallback": fallback},
    )
    with torch.no_grad():
        expected = model(x)
        for _ in range(2 * (WARMUP + ROUNDS) + 1):
            torch.testing.assert_close(compiled(x), expected)
    reports = [r for s in sessions for r in s.reports if r.replaced]
    assert reports and all(r.in_context == "dropped" for r in reports)
