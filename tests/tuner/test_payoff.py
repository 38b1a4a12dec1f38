"""Which cached entries the finder serves (tuner/payoff.py) under each objective: an entry the
energy rule chose for its joules runs under "energy" when its stored figures show it within the
time tolerance of the fallback at fewer joules beyond the spread, never as a near tie, and under
"time" only where it clears the time rule, so a cache shared with an "energy" user cannot slow
a "time" user. No GPU: the figures are an H100's (softmax 8192^2 fp32, Inductor 0.1799 ms /
151 mJ, a kernel 0.1803 ms / 115 mJ), written into the entries."""

from __future__ import annotations

import dataclasses

import pytest
from graphs import python_artifact, python_loader

from kernelpro_backend.cache.artifact import KernelArtifact
from kernelpro_backend.options import Options
from kernelpro_backend.rewrite.providers import IsolatedMs
from kernelpro_backend.search.winner import ENERGY_NOISE, ENERGY_TIME_TOLERANCE
from kernelpro_backend.tuner import KernelFinder

INDUCTOR_MS, INDUCTOR_J = 0.1799, 0.151


def _entry(
    ms: float = 0.1803, j: float | None = 0.115, objective: str = "energy"
) -> KernelArtifact:
    """The tanh kernel with an H100 softmax's figures: chosen by `objective`'s rule."""
    return dataclasses.replace(
        python_artifact(),
        kernel_ms=ms,
        baselines_ms={"eager": 0.31, "inductor": INDUCTOR_MS},
        kernel_j=j,
        baselines_j={"eager": 0.25, "inductor": INDUCTOR_J},
        objective=objective,
    )


def _finder(cache, tanh_sg, entry: KernelArtifact, **options) -> KernelFinder:
    cache.put(cache.key_for(tanh_sg.key), entry)
    return KernelFinder(cache, Options(**options), python_loader)


def test_an_energy_pick_runs_under_energy_firmly_and_not_under_time(cache, tanh_sg):
    finder = _finder(cache, tanh_sg, _entry(), objective="energy")
    assert finder.find(tanh_sg) is not None
    # served as the energy rule's choice, not as a near tie: graphs not judged install it too
    assert finder.isolated_ms(tanh_sg) == IsolatedMs(0.1803, INDUCTOR_MS, tentative=False)
    assert _finder(cache, tanh_sg, _entry(), objective="energy", in_context=False).find(tanh_sg)
    # the same entry under "time": 0.2% slower than Inductor alone, not even a tentative tie
    timed = _finder(cache, tanh_sg, _entry(), objective="time")
    assert timed.find(tanh_sg) is None


def test_the_same_figures_chosen_by_the_time_rule_stay_a_near_tie(cache, tanh_sg):
    """An entry without the energy mark keeps today's rule under either objective: a near tie
    is served only tentatively (the in-context verdict decides)."""
    for objective in ("time", "energy"):
        finder = _finder(cache, tanh_sg, _entry(objective="time"), objective=objective)
        assert finder.find(tanh_sg) is not None
        assert finder.isolated_ms(tanh_sg) == IsolatedMs(0.1803, INDUCTOR_MS, tentative=True)


@pytest.mark.parametrize(
    "ms, j",
    [
        # more than the tolerance slower than Inductor, with its launch's minimum gain charged
        (INDUCTOR_MS * (1 + ENERGY_TIME_TOLERANCE), 0.115),
        # joules within the spread of Inductor's
        (0.1803, INDUCTOR_J * (1 - ENERGY_NOISE) + 1e-4),
        # no joule figure at all
        (0.1803, None),
    ],
)
def test_an_energy_pick_is_refused_without_its_figures_against_the_fallback(cache, tanh_sg, ms, j):
    assert _finder(cache, tanh_sg, _entry(ms, j), objective="energy").find(tanh_sg) is None


def test_an_energy_pick_is_weighed_against_the_fallback_in_use(cache, tanh_sg):
    """Under the eager fallback the reference is eager's figures (0.31 ms: the kernel clears
    the time rule against it) and the entry runs under either objective."""
    for objective in ("time", "energy"):
        finder = _finder(cache, tanh_sg, _entry(), objective=objective, fallback="eager")
        assert finder.find(tanh_sg) is not None
        assert not finder.isolated_ms(tanh_sg).tentative  # type: ignore[union-attr]


def test_a_time_user_sharing_an_energy_users_cache_runs_the_fallback(cache, tanh_sg):
    """The "energy" user's search stores its pick; a "time" user of the same cache does not
    run it (it would be 0.2% slower than Inductor) and does not search it again either."""
    searches = []

    def search(sg):
        searches.append(sg)
        return _entry()

    energy = KernelFinder(cache, Options(search="on-miss", objective="energy"), python_loader,
                          search)  # fmt: skip
    assert energy.find(tanh_sg) is not None and len(searches) == 1
    assert cache.get(cache.key_for(tanh_sg.key)).objective == "energy"
    time_user = KernelFinder(cache, Options(search="on-miss"), python_loader, search)
    assert time_user.find(tanh_sg) is None and len(searches) == 1
