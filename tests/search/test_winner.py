"""Rewards, the tie rule, winner choice (objective "energy": tolerance, noise, ties, reasons)
and budget validation."""

from __future__ import annotations

import dataclasses
import math

import pytest

from kernelpro_backend.options import Options
from kernelpro_backend.runtime.result import EvalResult, EvalStatus
from kernelpro_backend.search import Budget, Measured, RewardModel, choose_winner
from kernelpro_backend.search.budget import BudgetTracker
from kernelpro_backend.search.rewards import faster_beyond_spread, tied
from kernelpro_backend.search.winner import ENERGY_NOISE, ENERGY_TIME_TOLERANCE, energy_pick


def ok(ms, spread=0.01, energy=None):
    return EvalResult(EvalStatus.OK, median_ms=ms, spread_ms=spread, energy_j=energy)


def test_reward_is_log_speedup_with_failures_below_every_working_candidate():
    model = RewardModel(reference_ms=2.0)
    assert model.reward(ok(1.0)) == pytest.approx(math.log(2.0))
    assert model.reward(ok(100.0)) == model.ok_floor  # uselessly slow: clipped
    compile_error = model.reward(EvalResult(EvalStatus.COMPILE_ERROR))
    wrong = model.reward(EvalResult(EvalStatus.WRONG))
    assert wrong < compile_error < model.ok_floor
    for status in EvalStatus:
        if status is not EvalStatus.OK:
            assert model.reward(EvalResult(status)) < model.ok_floor
    with pytest.raises(ValueError, match="positive finite"):
        RewardModel(reference_ms=0.0)
    with pytest.raises(ValueError, match="below the floor"):
        RewardModel(reference_ms=1.0, penalties={EvalStatus.WRONG: 0.0})


def test_differences_inside_the_spread_are_ties():
    assert faster_beyond_spread(ok(1.0), ok(1.05))
    assert tied(ok(1.0), ok(1.015))
    assert not faster_beyond_spread(ok(1.0), EvalResult(EvalStatus.CRASHED))


def test_fallback_keeps_ties_and_energy_picks_among_tied_winners():
    baselines = {"eager": ok(3.0), "inductor": ok(2.0)}
    fast, frugal, tie_with_inductor = (
        Measured(1, "fast", ok(1.00, energy=2.0)),
        Measured(2, "frugal", ok(1.01, energy=1.0)),
        Measured(3, "barely", ok(1.99, energy=0.1)),
    )
    measured = [fast, frugal, tie_with_inductor]
    assert choose_winner(measured, baselines, "time").winner == "fast"
    assert choose_winner(measured, baselines, "energy").winner == "frugal"
    only_tie = choose_winner([tie_with_inductor], baselines, "energy")
    assert only_tie.winner == "inductor" and only_tie.best == tie_with_inductor
    with pytest.raises(ValueError, match="objective"):
        choose_winner(measured, baselines, "power")


def test_winner_without_working_baselines_or_candidates():
    broken = {"eager": EvalResult(EvalStatus.CRASHED), "inductor": EvalResult(EvalStatus.CRASHED)}
    only_kernel = choose_winner([Measured(1, "k", ok(5.0))], broken)
    assert only_kernel.winner == "k" and only_kernel.node_id == 1
    nothing = choose_winner([Measured(1, "k", EvalResult(EvalStatus.WRONG))], broken)
    assert nothing.winner == "inductor" and nothing.best is None


def test_budget_validation_and_options():
    with pytest.raises(ValueError, match="max_trials"):
        Budget(max_trials=0)
    with pytest.raises(ValueError, match="sol_stop_fraction"):
        Budget(sol_stop_fraction=1.5)
    b = Budget.from_options(Options(max_trials=7, budget_s=3.0))
    assert (b.max_trials, b.max_seconds, b.plateau_trials) == (7, 3.0, 16)


def test_the_plateau_window_spans_three_generations_of_what_is_in_flight():
    options = Options(max_trials=64, budget_s=30.0)
    assert Budget.from_options(options, in_flight=4).plateau_trials == 16
    wide = Budget.from_options(options, in_flight=8)
    assert wide.plateau_trials == 24
    tracker = BudgetTracker(wide)
    for _ in range(20):  # one win, then 19 trials without a gain: not yet a plateau at 8 wide
        tracker.record(1.0, None)
    assert tracker.stop_reason() is None
    for _ in range(5):
        tracker.record(1.0, None)
    assert tracker.stop_reason() == "plateau"


def test_a_win_smaller_than_the_replacement_cost_keeps_the_fallback():
    # 5 us faster than Inductor, far beyond a 0.1 us spread: real, but below a 30 us floor.
    fast = ok(0.010, spread=0.0001)
    base = {"inductor": ok(0.015, spread=0.0001)}
    measured = [Measured(node_id=1, candidate="k", result=fast)]
    assert choose_winner(measured, base, min_gain_ms=0.0).winner == "k"
    choice = choose_winner(measured, base, min_gain_ms=0.030)
    assert choice.winner == "inductor" and choice.best.candidate == "k"
    # A large win passes the same floor.
    big = [Measured(node_id=2, candidate="big", result=ok(0.5, spread=0.001))]
    assert (
        choose_winner(big, {"inductor": ok(1.0, spread=0.001)}, min_gain_ms=0.030).winner == "big"
    )


def test_a_memory_bound_search_runs_to_its_bandwidth_target_not_to_a_plateau():
    budget = Budget(max_trials=64, plateau_trials=16, bandwidth_target=0.9, sol_stop_fraction=0.9)
    tracker = BudgetTracker(budget)
    for _ in range(40):  # no gain for 39 trials, at 70% of the DRAM bound: keep going
        tracker.record(1.0, 0.7)
    assert tracker.stop_reason() is None
    tracker.record(1.2, 0.92)  # the target reached: the speed-of-light rule stops it
    assert tracker.stop_reason() == "sol"
    plain = BudgetTracker(dataclasses.replace(budget, bandwidth_target=None))
    for _ in range(40):
        plain.record(1.0, 0.7)
    assert plain.stop_reason() == "plateau"
    capped = BudgetTracker(dataclasses.replace(budget, max_trials=48))
    for _ in range(48):
        capped.record(1.0, 0.7)
    assert capped.stop_reason() == "max_trials"  # the budget still ends it


def test_a_candidate_with_a_slower_host_path_must_save_its_surcharge_too():
    """A CUTLASS call costs more host time than a Triton launch: when it is shorter on the GPU
    than its host path, it must save that excess too, and the fastest candidate that does wins."""
    baselines = {"inductor": ok(0.040, spread=0.0005)}
    cutlass = Measured(1, "cutlass", ok(0.025, spread=0.0005))  # saves 15 us
    triton = Measured(2, "triton", ok(0.030, spread=0.0005))  # saves 10 us
    surcharge = lambda c, ms: 0.026 if c == "cutlass" and ms < 0.050 else 0.0  # noqa: E731
    plain = choose_winner([cutlass, triton], baselines, min_gain_ms=0.002)
    assert plain.winner == "cutlass"
    charged = choose_winner([cutlass, triton], baselines, min_gain_ms=0.002, surcharge=surcharge)
    assert charged.winner == "triton" and charged.best is cutlass  # still reported as fastest
    long_kernel = {"inductor": ok(0.160, spread=0.001)}
    won = choose_winner(
        [Measured(1, "cutlass", ok(0.140, spread=0.001))], long_kernel, min_gain_ms=0.002,
        surcharge=surcharge,
    )  # fmt: skip
    assert won.winner == "cutlass"  # 140 us on the GPU hides its 50 us host path


def test_the_codegen_space_charges_cutlass_specs_by_their_gpu_time():
    from kernelpro_backend.codegen.cutlass_match import EXTRA_HOST_US, HOST_US
    from kernelpro_backend.search.space import codegen_space

    space = codegen_space()

    class Spec:  # a stand-in with the fields the rule reads
        template = "gemm_cutlass"

    assert space.surcharge_ms("source text", 0.001) == 0.0  # not a spec: no knobs, no rule
    from kernelpro_backend.codegen import host_surcharge_ms

    assert host_surcharge_ms(Spec(), (HOST_US - 1) / 1e3) == EXTRA_HOST_US / 1e3
    assert host_surcharge_ms(Spec(), HOST_US / 1e3) == 0.0
    Spec.template = "gemm"
    assert host_surcharge_ms(Spec(), 0.001) == 0.0


# ---- objective "energy": tolerance, noise, ties, the fallback, the reasons -------------------


def energy_case(*entries, baselines=None):
    """Measured kernels (name, ms, J) with a small spread, against Inductor at 2 ms."""
    measured = [Measured(i, name, ok(ms, 0.001, j)) for i, (name, ms, j) in enumerate(entries, 1)]
    base = baselines if baselines is not None else {"inductor": ok(2.0, 0.001, 10.0)}
    return measured, base


def test_energy_takes_a_candidate_at_the_time_tolerance_but_not_past_it():
    assert ENERGY_TIME_TOLERANCE == 0.02
    at_edge = energy_case(("fast", 1.000, 1.0), ("frugal", 1.020, 0.5))
    assert choose_winner(*at_edge, "energy").winner == "frugal"
    past = energy_case(("fast", 1.000, 1.0), ("frugal", 1.0201, 0.5))
    choice = choose_winner(*past, "energy")
    assert choice.winner == "fast" and choice.why["rule"] == "fastest: none saves more"


def test_energy_needs_a_saving_beyond_the_noise_to_trade_time():
    assert ENERGY_NOISE == 0.07  # above the repeat spread the H100 showed (3-6%)
    inside = energy_case(("fast", 1.00, 1.000), ("frugal", 1.01, 0.931))  # 6.9% fewer J
    assert choose_winner(*inside, "energy").winner == "fast"
    beyond = energy_case(("fast", 1.00, 1.000), ("frugal", 1.01, 0.929))  # 7.1% fewer J
    assert choose_winner(*beyond, "energy").winner == "frugal"


def test_energy_ties_within_the_noise_go_to_the_faster_then_the_lower_node():
    # b and c save > 7% and are within 7% of each other's joules: the faster of them, c
    tied = energy_case(("fast", 1.000, 1.0), ("b", 1.015, 0.80), ("c", 1.010, 0.82))
    assert choose_winner(*tied, "energy").winner == "c"
    same = energy_case(("fast", 1.000, 1.0), ("b", 1.010, 0.80), ("c", 1.010, 0.80))
    assert choose_winner(*same, "energy").node_id == 2
    # d saves more than 7% beyond c: fewest joules wins even though c is faster
    apart = energy_case(("fast", 1.000, 1.0), ("c", 1.005, 0.90), ("d", 1.015, 0.80))
    assert choose_winner(*apart, "energy").winner == "d"


def test_energy_without_a_figure_for_the_fastest_keeps_it():
    no_j = energy_case(("fast", 1.00, None), ("frugal", 1.01, 0.1))
    choice = choose_winner(*no_j, "energy")
    assert choice.winner == "fast" and choice.why["rule"] == "no joule figure for the fastest"
    unmeasured = energy_case(("fast", 1.00, 1.0), ("other", 1.01, None))
    assert choose_winner(*unmeasured, "energy").winner == "fast"


def test_energy_may_keep_the_fallback_when_it_is_as_fast_and_uses_fewer_joules():
    # the kernel beats Inductor beyond both spreads (1.00 vs 1.015 ms, spreads 0.001) and
    # by min_gain 0; Inductor is within 2% of it and uses 10% fewer joules
    close = energy_case(("fast", 1.00, 1.0), baselines={"inductor": ok(1.015, 0.001, 0.9)})
    assert choose_winner(*close, "time").winner == "fast"
    choice = choose_winner(*close, "energy")
    assert choice.winner == "inductor" and choice.node_id is None
    assert choice.best is not None and choice.best.candidate == "fast"
    assert choice.why["winner"] == {"node": "inductor", "ms": 1.015, "j": 0.9}


def test_objective_time_ignores_joules_and_gives_no_reasons():
    case = energy_case(("fast", 1.00, 9.0), ("frugal", 1.001, 0.1))
    choice = choose_winner(*case, "time")
    assert choice.winner == "fast" and choice.why == {}


def test_energy_reasons_name_the_winner_and_the_fastest():
    case = energy_case(("fast", 1.00, 1.0), ("frugal", 1.01, 0.8))
    why = choose_winner(*case, "energy").why
    assert why["rule"] == "fewest joules within the time tolerance"
    assert why["winner"] == {"node": 2, "ms": 1.01, "j": 0.8}
    assert why["fastest"] == {"node": 1, "ms": 1.0, "j": 1.0}
    assert why["tolerance"] == ENERGY_TIME_TOLERANCE and why["noise"] == ENERGY_NOISE
    # a wider tolerance is a parameter of the rule itself
    pick, _ = energy_pick(
        (1, 1, ok(1.0, 0.001, 1.0)), [(2, 2, ok(1.04, 0.001, 0.5))], tolerance=0.05
    )
    assert pick[0] == 2


def test_energy_weighs_kernels_where_the_fallback_wins_on_time():
    # H100, softmax 8192x8192 fp32 (2026-12-06): no kernel beat Inductor (0.1799 ms) beyond the
    # spread, so the time rule kept it, and the energy rule never looked at a kernel 0.2%
    # slower that read 19% fewer joules. Its replacement cost (2 us) is charged to its time.
    inductor = {"inductor": ok(0.1799, 0.001, 0.1511)}
    case = energy_case(("wide", 0.1789, 0.1338), ("frugal", 0.1803, 0.1225), baselines=inductor)
    assert choose_winner(*case, "time", min_gain_ms=0.002).winner == "inductor"
    choice = choose_winner(*case, "energy", min_gain_ms=0.002)
    assert choice.winner == "frugal" and choice.node_id == 2
    assert choice.why["fastest"]["node"] == "inductor" and choice.why["within"] == 3
    assert choice.why["j_range"] == [0.1225, 0.1511]
    # charged 10 us to replace the fallback, it is 2.6% slower than Inductor: the fallback stays
    dear = choose_winner(*case, "energy", min_gain_ms=0.010)
    assert dear.winner == "inductor" and dear.why["within"] == 1


def test_energy_counts_what_was_within_the_tolerance():
    case = energy_case(("fast", 1.00, 1.0), ("close", 1.01, 0.97), ("slow", 1.05, 0.1))
    why = choose_winner(*case, "energy").why
    # fast and close are within 2%, Inductor (2 ms) and slow are not: no choice worth a trade
    assert why["within"] == 2 and why["j_range"] == [0.97, 1.0]
    assert why["rule"] == "fastest: none saves more"
