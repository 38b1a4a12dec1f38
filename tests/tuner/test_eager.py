"""The eager ATen call as a candidate: where eager beats the Inductor fallback clearly (beyond
the spread of both timings and by what kernelpro::launch costs), the subgraph's entry runs its
own ATen ops behind the opaque op; it carries no code, is admitted as such, and is re-proved as
the eager baseline."""

from __future__ import annotations

import torch

from kernelpro_backend.cache.artifact import KernelArtifact
from kernelpro_backend.options import OP_MIN_GAIN_US, Options
from kernelpro_backend.rewrite.inline import TraceableKernel
from kernelpro_backend.runtime.candidate import BaselineCandidate
from kernelpro_backend.runtime.result import EvalResult, EvalStatus
from kernelpro_backend.tuner import KernelFinder, artifact_candidate
from kernelpro_backend.tuner.admit import admit
from kernelpro_backend.tuner.eager import eager_artifact, is_eager


def _ms(median: float, spread: float = 0.01) -> EvalResult:
    return EvalResult(EvalStatus.OK, median_ms=median, spread_ms=spread)


def test_eager_wins_only_clearly_and_only_against_inductor():
    opts = Options()
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


def test_an_eager_entry_must_still_save_what_the_op_costs(cache, tanh_sg):
    small = eager_artifact({"eager": _ms(3.0, 0.0), "inductor": _ms(3.5, 0.0)}, Options())
    cache.put(cache.key_for(tanh_sg.key), small)
    strict = Options(min_gain_us=600.0)  # the user asks for more than this 500 us
    assert KernelFinder(cache, strict, lambda a: None).find(tanh_sg) is None


def test_an_eager_entry_is_admitted_without_code_and_reproved_as_eager():
    won = eager_artifact({"eager": _ms(3.0), "inductor": _ms(3.5)}, Options())
    assert admit(won) is None
    assert artifact_candidate(won) == BaselineCandidate("eager")
    smuggled = KernelArtifact(language="aten", source="import os", entry="eager")
    assert "carries no code" in (admit(smuggled) or "")
