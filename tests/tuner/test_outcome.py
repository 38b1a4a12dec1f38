"""What the cache stores for a search's outcome (tuner/outcome.py) under objective "energy":
the energy rule's pick, marked and with its joules, where the finder will serve it against the
fallback; else the time rule's pick; nothing where the energy rule keeps the fallback. The
outcomes come from the real selection rules (search/winner.py) over fake figures."""

from __future__ import annotations

import pytest

from kernelpro_backend.options import Options
from kernelpro_backend.runtime.candidate import SourceCandidate
from kernelpro_backend.runtime.result import EvalResult, EvalStatus
from kernelpro_backend.search import Measured, SearchOutcome, choose_winner
from kernelpro_backend.search.winner import OBJECTIVES
from kernelpro_backend.tuner import KernelFinder
from kernelpro_backend.tuner.eager import is_eager
from kernelpro_backend.tuner.outcome import outcome_artifact


def _ok(ms: float, j: float | None = None) -> EvalResult:
    return EvalResult(EvalStatus.OK, median_ms=ms, spread_ms=1e-5, energy_j=j)


def _kernel(node: int, ms: float, j: float | None = None) -> Measured:
    source = f"def k{node}(x):\n    return [x]\n"
    return Measured(node, SourceCandidate("triton", source, f"k{node}"), _ok(ms, j))


def _outcome(measured, baselines, options: Options, objective: str = "energy") -> SearchOutcome:
    choices = {
        rule: choose_winner(measured, baselines, rule, options.min_gain_ms()) for rule in OBJECTIVES
    }
    c = choices[objective]
    return SearchOutcome("digest", c.winner, c.node_id, c.result, baselines, None, None,
                         len(measured), 0, "budget", {}, choices)  # fmt: skip


def _stored(outcome, sg, options, tmp_path):
    return outcome_artifact(outcome, sg, "log", tmp_path, options)


def test_a_kernel_chosen_for_its_joules_is_stored_marked_and_served_under_energy(
    cache, tanh_sg, tmp_path
):
    """H100 figures (softmax 8192^2 fp32): Inductor 0.1799 ms / 151 mJ, a kernel 0.1803 ms /
    115 mJ: the time rule keeps Inductor, the energy rule the kernel."""
    options = Options(objective="energy")
    baselines = {"eager": _ok(0.31, 0.25), "inductor": _ok(0.1799, 0.151)}
    outcome = _outcome([_kernel(1, 0.1803, 0.115)], baselines, options)
    assert outcome.winner_id == 1 and outcome.choices["time"].winner == "inductor"
    stored = _stored(outcome, tanh_sg, options, tmp_path)
    assert stored is not None and stored.entry == "k1" and stored.objective == "energy"
    assert stored.kernel_j == 0.115 and stored.baselines_j == {"eager": 0.25, "inductor": 0.151}
    assert _stored(outcome.under("time"), tanh_sg, options, tmp_path) is None
    cache.put(cache.key_for(tanh_sg.key), stored)
    loaded = []
    KernelFinder(cache, options, loaded.append).find(tanh_sg)
    assert loaded == [stored]  # the finder serves exactly what the search stored


def test_an_energy_pick_the_finder_would_refuse_leaves_the_time_rules_pick(tanh_sg, tmp_path):
    """The energy rule picks kernel 2 against kernel 1 (12% fewer joules, 1.3% slower), but
    against Inductor, what runs if the finder refuses it, it neither clears the time rule nor
    saves joules beyond the spread: kernel 1, the time rule's pick, is stored."""
    options = Options(objective="energy")
    baselines = {"eager": _ok(0.31, 0.25), "inductor": _ok(0.153, 0.145)}
    measured = [_kernel(1, 0.150, 0.16), _kernel(2, 0.152, 0.14)]
    outcome = _outcome(measured, baselines, options)
    assert outcome.winner_id == 2 and outcome.choices["time"].node_id == 1
    stored = _stored(outcome, tanh_sg, options, tmp_path)
    assert stored is not None and stored.entry == "k1" and stored.objective == "time"
    assert stored.kernel_j == 0.16  # the joules are recorded whichever rule chose it


def test_eager_chosen_for_its_joules_is_stored_and_served_under_energy_only(
    cache, tanh_sg, tmp_path
):
    """A kernel beats eager and Inductor on time; eager, 0.9% slower than it and tied with
    Inductor (no near-tie rule: in_context off), uses 20% fewer joules: the eager entry is
    stored for the energy rule; under "time" it does not run."""
    options = Options(objective="energy", in_context=False)
    baselines = {"eager": _ok(9.99, 0.8), "inductor": _ok(10.0, 1.0)}
    outcome = _outcome([_kernel(1, 9.9, 1.0)], baselines, options)
    assert outcome.winner == "eager" and outcome.choices["time"].node_id == 1
    stored = _stored(outcome, tanh_sg, options, tmp_path)
    assert stored is not None and is_eager(stored) and stored.objective == "energy"
    cache.put(cache.key_for(tanh_sg.key), stored)
    assert KernelFinder(cache, options, lambda a: None).find(tanh_sg) is not None
    time_user = Options(in_context=False)
    assert KernelFinder(cache, time_user, lambda a: None).find(tanh_sg) is None


def test_where_the_time_rule_keeps_eager_its_entry_stays_unless_the_energy_pick_runs(
    tanh_sg, tmp_path
):
    """Eager beats Inductor clearly; a kernel 1.5% slower than eager uses 20% fewer joules, the
    energy rule's pick. Against Inductor, what runs if the finder refuses it, it is slower and
    saves no joules beyond the spread: eager's entry is stored, as under "time", not a kernel
    the finder would refuse (Inductor would run, 1% slower than eager)."""
    options = Options(objective="energy")
    baselines = {"eager": _ok(10.0, 1.0), "inductor": _ok(10.1, 0.82)}
    outcome = _outcome([_kernel(1, 10.15, 0.8)], baselines, options)
    assert outcome.winner_id == 1 and outcome.choices["time"].winner == "eager"
    stored = _stored(outcome, tanh_sg, options, tmp_path)
    assert stored is not None and is_eager(stored) and stored.objective == "time"


def test_where_the_energy_rule_keeps_the_fallback_nothing_is_stored(tanh_sg, tmp_path):
    """A kernel 1% faster than Inductor is the time rule's pick; Inductor, at 20% fewer joules,
    the energy rule's: nothing is stored (not even eager, a near tie of Inductor's alone)."""
    options = Options(objective="energy")
    baselines = {"eager": _ok(1.01, 1.0), "inductor": _ok(1.0, 0.8)}
    outcome = _outcome([_kernel(1, 0.99, 1.0)], baselines, options)
    assert outcome.winner == "inductor" and outcome.choices["time"].node_id == 1
    assert _stored(outcome, tanh_sg, options, tmp_path) is None
    time_pick = _stored(outcome.under("time"), tanh_sg, options, tmp_path)
    assert time_pick is not None and time_pick.entry == "k1"


@pytest.mark.parametrize("with_eager", [False, True])
def test_a_search_under_time_stores_the_bytes_it_did_before(tanh_sg, tmp_path, with_eager):
    """No joules measured, the time rule: none of the energy fields is written."""
    options = Options()
    baselines = {"eager": _ok(3.0), "inductor": _ok(3.5)}
    measured = [] if with_eager else [_kernel(1, 1.0)]
    stored = _stored(_outcome(measured, baselines, options, "time"), tanh_sg, options, tmp_path)
    assert stored is not None and is_eager(stored) is with_eager
    assert not {"objective", "kernel_j", "baselines_j"} & set(stored.to_dict())
