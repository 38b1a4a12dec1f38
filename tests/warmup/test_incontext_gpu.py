"""The in-context check's LM-head verdict on the GPU: the step compiled in turns (the model and
a copy of it side by side, as the check runs it there), the verdict recorded against the
graph's fingerprint, and a later compile of a fresh model honouring it."""

from __future__ import annotations

import pytest
import torch

from kernelpro_backend.backend import make_backend
from kernelpro_backend.bench.workloads import WORKLOADS
from kernelpro_backend.cache import KernelCache
from kernelpro_backend.warmup import incontext, incontext_steps

pytestmark = pytest.mark.gpu


class _Finder:
    """A cache-only finder that serves no kernel: the check judges the rewrite alone."""

    def __init__(self, cache: KernelCache) -> None:
        self.cache, self.serve_held = cache, False

    def find(self, subgraph):  # type: ignore[no-untyped-def]
        return None


def test_a_gpu_checks_lm_head_verdict_turns_the_rewrite_off_for_a_fresh_model(
    tmp_path, monkeypatch
):
    real = incontext_steps.time_rounds

    def made_up_rounds(steppers, rounds):  # type: ignore[no-untyped-def]
        # the real rounds run (every variant compiled and stepped); the verdict's figures are
        # made up: each later variant 1 ms faster (the LM-head rewrite's off variant is later)
        _, peaks = real(steppers, 1)
        return [[10.0 - i] * rounds for i in range(len(steppers))], peaks

    monkeypatch.setattr(incontext_steps, "time_rounds", made_up_rounds)
    w = WORKLOADS["mini_gpt"](torch.device("cuda"), None, "tiny")
    with KernelCache(tmp_path / "c") as cache:
        lines = incontext.check_in_context(w.fresh_model(), w.inputs, {}, w.loss_fn, _Finder(cache))
        assert any(line.endswith(incontext.RECORDED) for line in lines), lines
        sessions: list = []
        torch._dynamo.reset()
        compiled = torch.compile(
            w.fresh_model(), backend=make_backend(_Finder(cache), sessions=sessions)
        )
        w.loss_fn(compiled(*w.inputs)).backward()
        assert sessions and sessions[0].turned_off == {"rewrite_linear_cross_entropy": False}
        assert not sessions[0].rewrites.get("linear_cross_entropy")
    torch._dynamo.reset()
