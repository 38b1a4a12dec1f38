"""The end of a warm-up waits for CUTLASS builds still running, within its deadline."""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace

from kernelpro_backend.warmup import offline as warmup_module


class _Builds:
    def __init__(self, finishes: bool) -> None:
        self.finishes, self.waits = finishes, []

    def running(self) -> int:
        return 0 if self.waits and self.finishes else 3

    def wait(self, timeout_s):
        self.waits.append(timeout_s)
        return self.finishes


def _provider(builds):
    return SimpleNamespace(searcher=SimpleNamespace(cutlass=builds))


def test_without_a_deadline_the_builds_get_their_full_wait(caplog):
    builds = _Builds(finishes=True)
    with caplog.at_level(logging.INFO, logger="kernelpro"):
        warmup_module._finish_builds(_provider(builds))
    assert builds.waits == [warmup_module.BUILDS_WAIT_S]
    assert "waiting up to 600 s for 3 CUTLASS" in caplog.text
    assert "starts beside them" not in caplog.text


def test_with_a_deadline_the_check_goes_first_and_says_so(caplog):
    builds = _Builds(finishes=False)
    with caplog.at_level(logging.INFO, logger="kernelpro"):
        warmup_module._finish_builds(_provider(builds), until=time.perf_counter() + 30.0)
    (waited,) = builds.waits
    assert 29.0 < waited <= 30.0
    assert "3 CUTLASS GEMM libraries still building at the deadline's search share" in caplog.text


def test_a_search_share_already_spent_waits_not_at_all():
    builds = _Builds(finishes=False)
    warmup_module._finish_builds(_provider(builds), until=time.perf_counter() - 5.0)
    assert builds.waits == [0.0]


def test_no_builds_no_wait():
    builds = SimpleNamespace(
        running=lambda: 0, wait=lambda t: (_ for _ in ()).throw(AssertionError)
    )
    warmup_module._finish_builds(_provider(builds), until=None)
