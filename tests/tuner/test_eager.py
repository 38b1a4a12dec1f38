"""The eager ATen call as a candidate: where eager beats the Inductor fallback clearly (beyond
the spread of both timings and by what kernelpro::launch costs), the subgraph's entry runs its
own ATen ops behind the opaque op; it carries no code, is admitted as such, and is re-proved as
the eager baseline."""

from __future__ import annotations

import torch

from kernelpro_backend.cache.artifact import KernelArtifact
from kernelpro_backend.options import OP_MIN_GAIN_US, Options
from kernelpro_backend.rewrite.inline import TraceableKernel
from kernelpro_backend.rewrite.providers import IsolatedMs
from kernelpro_backend.runtime.candidate import BaselineCandidate
from kernelpro_backend.runtime.result import EvalResult, EvalStatus
from kernelpro_backend.tuner import KernelFinder, artifact_candidate
from kernelpro_backend.tuner.admit import admit
from kernelpro_backend.tuner.eager import NEAR_TIE, eager_artifact, is_eager


def _ms(median: float, spread: float = 0.01) -> EvalResult:
    return EvalResult(EvalStatus.OK, median_ms=median, spread_ms=spread)


def test_eager_wins_only_clearly_and_only_against_inductor():
    opts = Options(in_context=False)  # today's rule: no near tie is stored
    won = eager_artifact({"eager": _ms(3.0), "inductor": _ms(3.5)}, opts)
    assert won is not None and is_eager(won) and won.kernel_ms == 3.0
    assert won.baselines_ms == {"eager": 3.0, "inductor": 3.5}
    # Inside the spread of the two timings: a tie, the fallback keeps its place.
    assert eager_artifact({"eager": _ms(3.0, 0.3), "inductor": _ms(3.5, 0.3)}, opts) is None
    # Faster, but by less than a launch through kernelpro::launch costs.
    gain = OP_MIN_GAIN_US / 1e3 / 2
    assert eager_artifact({"eager": _ms(1.0, 0.0), "inductor": _ms(1.0 + gain, 0.0)}, opts) is None
    # Under the eager fallback eager already runs.
    eager_fallback = Options(fallback="eager")
    assert eager_artifact({"eager": _ms(3.0), "inductor": _ms(3.5)}, eager_fallback) is None
    failed = EvalResult(EvalStatus.COMPILE_ERROR, message="inductor failed")
    assert eager_artifact({"eager": _ms(3.0), "inductor": failed}, opts) is None


def test_a_cached_eager_entry_runs_the_subgraphs_ops_behind_the_op(cache, tanh_sg):
    won = eager_artifact({"eager": _ms(3.0), "inductor": _ms(3.5)}, Options())
    cache.put(cache.key_for(tanh_sg.key), won)

    def no_loader(artifact):
        raise AssertionError("an eager entry has no code to load")

    kernel = KernelFinder(cache, Options(), no_loader).find(tanh_sg)
    assert kernel is not None and not isinstance(kernel, TraceableKernel)  # never inlined
    x = torch.randn(8, 32)
    torch.testing.assert_close(kernel(x)[0], torch.tanh(x) * 3.0 + 1.0)


def test_a_near_tie_is_stored_tentatively_only_with_the_in_context_verdict():
    """Within NEAR_TIE of Inductor alone (either side), or faster by less than the op costs:
    stored under `in_context` for the verdict to decide; beyond the band never."""
    for eager_ms, inductor_ms in [(3.0, 3.0), (3.0 * (1 + NEAR_TIE) - 0.01, 3.0), (1.0, 1.0001)]:
        baselines = {"eager": _ms(eager_ms, 0.0), "inductor": _ms(inductor_ms, 0.0)}
        tied = eager_artifact(baselines, Options())
        assert tied is not None and is_eager(tied) and tied.kernel_ms == eager_ms
        assert eager_artifact(baselines, Options(in_context=False)) is None
    slower = {"eager": _ms(3.0 * (1 + NEAR_TIE) + 0.01, 0.0), "inductor": _ms(3.0, 0.0)}
    assert eager_artifact(slower, Options()) is None


def test_an_eager_entry_must_still_save_what_the_op_costs(cache, tanh_sg):
    small = eager_artifact({"eager": _ms(3.0, 0.0), "inductor": _ms(3.5, 0.0)}, Options())
    cache.put(cache.key_for(tanh_sg.key), small)
    # the user asks for more than this 500 us; without the in-context verdict: not served
    strict = Options(min_gain_us=600.0, in_context=False)
    assert KernelFinder(cache, strict, lambda a: None).find(tanh_sg) is None
    # with it, a near tie (3.0 ms against 3.5) is served tentatively, for the verdict to decide
    finder = KernelFinder(cache, Options(min_gain_us=600.0), lambda a: None)
    assert finder.find(tanh_sg) is not None
    assert finder.isolated_ms(tanh_sg) == IsolatedMs(3.0, 3.5, tentative=True)


def test_a_clear_eager_win_is_served_firmly(cache, tanh_sg):
    won = eager_artifact({"eager": _ms(3.0), "inductor": _ms(3.5)}, Options())
    cache.put(cache.key_for(tanh_sg.key), won)
    finder = KernelFinder(cache, Options(), lambda a: None)
    assert finder.find(tanh_sg) is not None
    assert finder.isolated_ms(tanh_sg) == IsolatedMs(3.0, 3.5)


def test_a_tied_eager_entry_is_not_served_behind_a_shape_dispatcher(cache, tanh_sg):
    """A dispatcher's graph is never judged, so a near tie stays out of it."""
    tied = eager_artifact({"eager": _ms(3.0, 0.0), "inductor": _ms(3.0, 0.0)}, Options())
    assert tied is not None
    finder = KernelFinder(cache, Options(), lambda a: None)
    assert finder.use(tanh_sg, tied, behind_op=True) is None
    assert finder.use(tanh_sg, tied) is not None


def test_an_eager_entry_is_admitted_without_code_and_reproved_as_eager():
    won = eager_artifact({"eager": _ms(3.0), "inductor": _ms(3.5)}, Options())
    assert admit(won) is None
    assert artifact_candidate(won) == BaselineCandidate("eager")
    smuggled = KernelArtifact(language="aten", source="import os", entry="eager")
    assert "carries no code" in (admit(smuggled) or "")
