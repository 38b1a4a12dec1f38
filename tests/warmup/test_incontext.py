"""The warm-up's in-context rule (incontext.decide) with made-up step times, and the verdicts'
file (cache/context.py): which kernels are recorded as losing inside their model."""

from __future__ import annotations

import pytest

from kernelpro_backend.cache.context import ContextVerdicts
from kernelpro_backend.warmup.incontext import decide


def timer(times: dict[frozenset[str], float]):  # type: ignore[no-untyped-def]
    asked: list[frozenset[str]] = []

    def time_without(excluded: frozenset[str]) -> float:
        asked.append(excluded)
        return times[excluded]

    return time_without, asked


def test_kernels_that_speed_the_step_up_are_kept_after_two_timings_of_each_side():
    time_without, asked = timer({frozenset(): 10.0, frozenset({"a", "b"}): 10.5})
    losers, lines = decide(time_without, ["a", "b"], first=10.0)
    every = frozenset({"a", "b"})
    assert losers == [] and asked == [every, frozenset(), every]
    assert "10.000 ms a step, the fallback alone 10.500 ms" in lines[0]


def test_the_fallback_gets_its_best_of_two_timings_too():
    """A fallback timed once 30% slow (a shared host) would keep kernels that lose: each side
    is its best of two, and their spread widens the margin for blame."""
    alone = iter([13.0, 10.0])
    every = frozenset({"a"})

    def time_without(excluded: frozenset[str]) -> float:
        return next(alone) if excluded == every else 10.3

    losers, lines = decide(time_without, ["a"], first=10.3)
    assert losers == ["a"] and "the fallback alone 10.000 ms" in lines[0]
    assert "margin 30.0%" in lines[0]


def test_the_kernel_whose_absence_speeds_the_step_up_is_the_one_recorded():
    times = {
        frozenset(): 10.6,
        frozenset({"a", "b"}): 10.2,
        frozenset({"a"}): 10.7,  # a helps
        frozenset({"b"}): 9.9,  # b hurts
    }
    time_without, _ = timer(times)
    losers, lines = decide(time_without, ["a", "b"], first=10.6)
    assert losers == ["b"]
    assert any("without b" in line for line in lines)


def test_a_deadline_while_blaming_sends_them_all_away_and_says_why():
    """The step with every kernel against the step without is timed first; the deadline may
    stop the blaming after it (each blame is a compile of the model): then all go, reported
    with the comparison (an H100 BERT warm-up's check said only 'out of time' and held them,
    for every later warm-up to meet the same check with more kernels)."""
    from kernelpro_backend.warmup.incontext_steps import OutOfTime

    every = frozenset({"a", "b", "c", "d", "e"})

    def time_without(excluded: frozenset[str]) -> float:
        if excluded not in (every, frozenset()):
            raise OutOfTime("after 3 step timing(s), 1 more would end past the deadline")
        return 10.0 if excluded == every else 10.4

    lines: list[str] = []
    losers, said = decide(time_without, sorted(every), first=10.4, lines=lines)
    assert losers == sorted(every) and said is lines and len(lines) == 2
    assert "10.400 ms a step, the fallback alone 10.000 ms" in lines[0]
    assert "no time to find which of the 5 lose; they all go" in lines[1]


def test_a_deadline_while_blaming_keeps_the_kernels_of_a_step_timed_ahead_of_the_fallback():
    """A ConvNeXt warm-up's check (H100): eight kernels 32.53 ms a step, the fallback alone
    32.30; without the first four 33.07, without the other four 31.87 (ahead of the fallback
    by more than the margin); then the deadline. The first four stay, the other four go."""
    from kernelpro_backend.warmup.incontext_steps import OutOfTime

    used = [f"k{i}" for i in range(8)]
    every, back, front = frozenset(used), frozenset(used[:4]), frozenset(used[4:])
    times = {frozenset(): 32.53, every: 32.30, back: 33.07, front: 31.87}

    def time_without(excluded: frozenset[str]) -> float:
        if excluded not in times:
            raise OutOfTime("after 4 step timing(s), 1 more would end past the deadline")
        return times[excluded]

    losers, lines = decide(time_without, used, first=32.53)
    assert losers == sorted(front)
    assert "without 4 of the 8 ran 31.870 ms" in lines[-1] and "the other 4 stay" in lines[-1]


def test_a_deadline_keeps_no_kernel_whose_step_was_not_ahead_by_the_margin():
    from kernelpro_backend.warmup.incontext_steps import OutOfTime

    used = [f"k{i}" for i in range(8)]
    every, back, front = frozenset(used), frozenset(used[:4]), frozenset(used[4:])
    times = {frozenset(): 32.53, every: 32.30, back: 33.07, front: 32.10}  # 0.6% ahead

    def time_without(excluded: frozenset[str]) -> float:
        if excluded not in times:
            raise OutOfTime("after 4 step timing(s), 1 more would end past the deadline")
        return times[excluded]

    losers, lines = decide(time_without, used, first=32.53)
    assert losers == used and "they all go" in lines[-1]


def test_when_no_single_kernel_is_to_blame_they_all_go():
    times = {frozenset(): 10.6, frozenset({"a", "b"}): 10.0, frozenset({"a"}): 10.55,
             frozenset({"b"}): 10.55}  # fmt: skip
    losers, _ = decide(timer(times)[0], ["a", "b"], first=10.6)
    assert losers == ["a", "b"]


def test_a_loser_whose_removal_still_leaves_the_step_slow_takes_the_rest_along():
    times = {frozenset(): 11.0, frozenset({"a", "b"}): 10.0, frozenset({"a"}): 11.1,
             frozenset({"b"}): 10.6}  # fmt: skip
    losers, _ = decide(timer(times)[0], ["a", "b"], first=11.0)
    # without b: 10.6 ms, still over the fallback's 10.0 beyond the margin: both go
    assert losers == ["a", "b"]


@pytest.mark.parametrize(("first", "again"), [(10.0, 10.3), (10.3, 10.0)])
def test_kernels_no_faster_than_the_fallback_go_even_inside_the_timings_spread(first, again):
    """Two timings of the same step 3% apart, the better of them 2% over the fallback's: the
    kernels gain nothing measurable and go (the fallback is never the risk)."""
    times = {frozenset(): again, frozenset({"a"}): 9.8}
    losers, lines = decide(timer(times)[0], ["a"], first=first)
    assert losers == ["a"] and "margin 3.0%" in lines[0]


def test_kernels_whose_better_timing_ties_the_fallback_stay():
    times = {frozenset(): 10.3, frozenset({"a"}): 10.0}
    losers, _ = decide(timer(times)[0], ["a"], first=10.0)
    assert losers == []


@pytest.mark.parametrize(("wins", "kept"), [((6, 8), True), ((8, 8), True), ((5, 8), False)])
def test_kernels_timed_in_turns_must_also_win_most_rounds(wins, kept):
    """Best timings 0.4% apart on a step whose rounds spread by 16% (a host-bound step): the
    kernels stay only if the step was faster with them in 6 of the 8 rounds as well."""
    times = {frozenset(): 4.555, frozenset({"a"}): 4.573}
    losers, lines = decide(timer(times)[0], ["a"], first=4.555, wins=wins)
    assert (losers == []) is kept
    assert f"faster with them in {wins[0]} of 8 rounds" in lines[0]


def test_winning_every_round_keeps_no_kernel_that_is_slower_at_best():
    times = {frozenset(): 10.3, frozenset({"a"}): 10.0}
    losers, _ = decide(timer(times)[0], ["a"], first=10.3, wins=(8, 8))
    assert losers == ["a"]


def test_verdicts_are_written_at_once_and_read_back(tmp_path, caplog):
    path = tmp_path / "context.json"
    ContextVerdicts(path).reject("d" * 64, pattern="norm", why="slower")
    again = ContextVerdicts(path)
    assert again.rejected("d" * 64)["pattern"] == "norm" and len(again) == 1
    assert again.rejected("e" * 64) is None
    path.write_text("{not json")
    assert ContextVerdicts(path).rejected("d" * 64) is None  # unreadable: warned, ignored
    assert "ignoring unreadable" in caplog.text


class _Finder:
    """A cache-only finder with no kernels: the check then judges the LM-head rewrite alone."""

    def __init__(self, cache):  # type: ignore[no-untyped-def]
        self.cache = cache

    def find(self, subgraph):  # type: ignore[no-untyped-def]
        return None


def test_a_graph_faster_without_the_lm_head_rewrite_gets_it_off_for_later_compiles(
    tmp_path, monkeypatch
):
    """The wiring of check_in_context on the CPU (the step's timer made up: 10 ms with the
    rewrite, 9 without): the verdict is recorded against the graph's fingerprint, and a later
    compile of the same graph through a provider of that cache leaves the chain as ops."""
    import torch
    import torch.nn.functional as F

    from kernelpro_backend.backend import make_backend
    from kernelpro_backend.bench import models
    from kernelpro_backend.cache import KernelCache
    from kernelpro_backend.warmup import incontext, incontext_steps

    def made_up_time(model, backend, opts, loss_fn, inputs):  # type: ignore[no-untyped-def]
        torch._dynamo.reset()
        loss_fn(torch.compile(model, backend=backend, options=opts)(*inputs)).backward()
        return (10.0 if opts.get("rewrite_linear_cross_entropy", True) else 9.0), 0

    monkeypatch.setattr(incontext_steps, "time_step", made_up_time)
    torch.manual_seed(0)
    model = models.LMHeadLoss(16, 50)
    inputs = (torch.randn(12, 16, requires_grad=True), torch.randint(0, 50, (12,)))
    opts = {"fallback": "eager"}
    with KernelCache(tmp_path / "c") as cache:
        lines = incontext.check_in_context(model, inputs, opts, lambda out: out, _Finder(cache))
        assert lines[-1].endswith(incontext.RECORDED), lines
        sessions: list = []
        torch._dynamo.reset()
        backend = make_backend(provider=_Finder(cache), sessions=sessions)
        loss = torch.compile(model, backend=backend, options=opts)(*inputs)
        torch.testing.assert_close(loss, F.cross_entropy(model.head(inputs[0]), inputs[1]))
        assert sessions and not sessions[0].rewrites.get("linear_cross_entropy")
        assert sessions[0].turned_off == {"rewrite_linear_cross_entropy": False}
    torch._dynamo.reset()


def test_graph_options_keep_only_the_rewrites_turned_off(tmp_path):
    verdicts = ContextVerdicts(tmp_path / "context.json")
    verdicts.set_graph_options("f" * 32, {"rewrite_linear_cross_entropy": False, "search": "off"})
    again = ContextVerdicts(tmp_path / "context.json")
    assert again.graph_options("f" * 32) == {"rewrite_linear_cross_entropy": False}
    assert again.graph_options("0" * 32) == {}
    assert again.rejected("graph:" + "f" * 32) is None  # not a kernel's verdict


def test_a_graph_has_the_same_fingerprint_in_every_compile_and_another_at_other_shapes():
    """The warm-up's verdict on a graph must find that graph again in a later process: the
    fingerprint is its code and its inputs' metadata, nothing of this process."""
    import torch

    from kernelpro_backend.backend import graph_fingerprint
    from kernelpro_backend.bench import models

    seen: list[str] = []

    def backend(gm, example_inputs):  # type: ignore[no-untyped-def]
        seen.append(graph_fingerprint(gm, example_inputs))
        return gm.forward

    for rows in (12, 12, 20):
        torch._dynamo.reset()
        model = models.LMHeadLoss(16, 50)
        x, t = torch.randn(rows, 16), torch.randint(0, 50, (rows,))
        torch.compile(model, backend=backend, dynamic=False)(x, t)
    assert len(seen) == 3 and seen[0] == seen[1] != seen[2]
    torch._dynamo.reset()


def test_many_kernels_are_bisected_down_to_the_one_to_blame():
    """Past EACH_IN_TURN kernels each timing is a whole compile: halves are left out, and
    only the halves whose absence speeds the step up are split further."""
    used = [f"k{i:02d}" for i in range(16)]

    def time_without(excluded: frozenset[str]) -> float:
        asked.append(excluded)
        kept = [k for k in used if k not in excluded]
        return 10.0 + sum(1.0 if k == "k11" else -0.05 for k in kept)

    asked: list[frozenset[str]] = []
    first = time_without(frozenset())
    losers, lines = decide(time_without, used, first)
    assert losers == ["k11"]
    assert len(asked) <= 4 + 2 * 4 + 1  # first, none twice, again, 2 per level, the rest
    assert any("without k11" in line for line in lines)


def test_a_check_releases_what_the_warmup_held_and_one_out_of_time_keeps_it_held(
    tmp_path, monkeypatch
):
    """incontext.check_in_context: the held digests are settled once judged; past the
    deadline nothing is timed and they stay held (a later compile runs the fallback)."""
    import time

    import torch

    from kernelpro_backend.bench import models
    from kernelpro_backend.cache import KernelCache
    from kernelpro_backend.warmup import incontext, incontext_steps

    timed: list[int] = []

    def made_up_time(model, backend, opts, loss_fn, inputs):  # type: ignore[no-untyped-def]
        timed.append(1)
        return 10.0, 0

    monkeypatch.setattr(incontext_steps, "time_step", made_up_time)
    model = models.LMHeadLoss(16, 50)
    inputs = (torch.randn(12, 16), torch.randint(0, 50, (12,)))
    opts = {"fallback": "eager", "rewrite_linear_cross_entropy": False}
    with KernelCache(tmp_path / "c") as cache:
        for digest in ("a" * 64, "b" * 64):
            cache.context.hold(digest, pattern="pointwise", model="LMHeadLoss")
        lines = incontext.check_in_context(
            model, inputs, opts, lambda out: out, _Finder(cache), held=["a" * 64],
            deadline=time.perf_counter() - 1,
        )  # fmt: skip
        assert not timed and "out of time" in lines[-1]
        assert ContextVerdicts(cache.context.path).held("a" * 64) is not None
        lines = incontext.check_in_context(
            model, inputs, opts, lambda out: out, _Finder(cache), held=["a" * 64]
        )
        again = ContextVerdicts(cache.context.path)
        assert again.held("a" * 64) is None and again.rejected("a" * 64) is None
        assert again.held("b" * 64) is not None  # another warm-up's: not this check's to settle
    torch._dynamo.reset()


def test_kernels_that_raise_the_steps_peak_memory_go():
    from kernelpro_backend.warmup.incontext import peak_verdict

    mib = 2**20
    assert "492 MiB with them against 397 alone" in peak_verdict(492 * mib, 397 * mib)
    assert peak_verdict(400 * mib, 397 * mib) is None  # within PEAK_MARGIN
    assert peak_verdict(None, 397 * mib) is None and peak_verdict(492 * mib, 0) is None


def test_two_variants_compiled_side_by_side_each_run_their_own_code(monkeypatch):
    """warmup/incontext_steps.time_rounds: two copies of a model compiled with different backends
    take turns in every round, each running its own compiled code (Dynamo keeps both)."""
    import copy

    import torch

    from kernelpro_backend.warmup import incontext_steps
    from kernelpro_backend.warmup.incontext_steps import _Stepper, time_rounds

    monkeypatch.setattr(incontext_steps, "ROUND_MS", 0.001)
    ran = {"a": 0, "b": 0}

    def backend(tag):  # type: ignore[no-untyped-def]
        def compile_(gm, example_inputs, **kwargs):  # type: ignore[no-untyped-def]
            def run(*args):  # type: ignore[no-untyped-def]
                ran[tag] += 1
                return gm.forward(*args)

            return run

        return compile_

    torch._dynamo.reset()
    model = torch.nn.Linear(4, 4)
    x = torch.randn(3, 4)
    steppers = [
        _Stepper(m, backend(tag), {}, lambda out: out.sum(), (x,))
        for m, tag in ((model, "a"), (copy.deepcopy(model), "b"))
    ]
    times, peaks = time_rounds(steppers, rounds=2)
    assert [len(t) for t in times] == [2, 2] and peaks == [0, 0]
    assert ran["a"] == 3 + 1 + 2 * 5 and ran["b"] == 3 + 2 * 5  # warm-up, estimate, rounds
    torch._dynamo.reset()


class _InTurns:
    """StepVariants with made-up round times for the variants timed in turns."""

    def __init__(self, turns):  # type: ignore[no-untyped-def]
        self.served = {"a" * 64: "pointwise"}
        self.sessions: list = []
        self.peaks: dict = {}
        self.host: dict = {}
        self.profiles: dict = {}
        self.graphed = False
        self.turns, self.asked = list(turns), []

    def in_turns(self, variants):  # type: ignore[no-untyped-def]
        self.asked.append(variants)
        return self.turns.pop(0) if self.turns else None

    def time_with(self, excluded, changed=None):  # type: ignore[no-untyped-def]
        raise AssertionError(f"timed on its own: {excluded}")


def test_the_kernels_against_none_are_decided_on_timings_taken_in_turns(tmp_path):
    """The first comparison comes from one run in turns (each side's best of each half of the
    rounds), not from compiles timed minutes apart; a kernel no faster goes."""
    import torch

    from kernelpro_backend.cache import KernelCache
    from kernelpro_backend.warmup import incontext

    with_kernel = [10.0, 10.1, 10.0, 10.2, 10.1, 10.0, 10.3, 10.0]
    without = [9.6, 9.7, 9.6, 9.8, 9.7, 9.6, 9.9, 9.6]
    steps = _InTurns([[with_kernel, without]])
    lines: list[str] = []
    with KernelCache(tmp_path / "c") as cache:
        finder = _Finder(cache)
        incontext._judge(torch.nn.Linear(2, 2), finder, steps, ["a" * 64], lines)
        assert steps.asked[0] == [(frozenset(), None), (None, None)]
        assert "1 kernel(s) 10.000 ms a step, the fallback alone 9.600 ms" in lines[0]
        assert ContextVerdicts(cache.context.path).rejected("a" * 64) is not None


def test_the_lm_head_rewrite_is_judged_on_and_off_in_turns(tmp_path):
    import types

    import torch

    from kernelpro_backend.cache import KernelCache
    from kernelpro_backend.warmup import incontext

    steps = _InTurns([[[6.0] * 8], [[10.0] * 8, [9.0] * 8]])
    steps.served = {}  # the step used no kernel: one variant in the first run
    steps.sessions = [
        types.SimpleNamespace(fingerprint="f" * 32, rewrites={"linear_cross_entropy": 1})
    ]
    lines: list[str] = []
    with KernelCache(tmp_path / "c") as cache:
        incontext._judge(torch.nn.Linear(2, 2), _Finder(cache), steps, [], lines)
        lm_off = {"rewrite_linear_cross_entropy": False}
        assert steps.asked[1] == [(frozenset(), None), (frozenset(), lm_off)]
        assert lines[-1].endswith(incontext.RECORDED) and "10.000 ms" in lines[-1]
        assert ContextVerdicts(cache.context.path).graph_options("f" * 32) == lm_off


@pytest.mark.parametrize(
    ("off_rounds", "recorded"),
    [
        # best 5.78 against 5.89 (2% apart) but faster in 5 of 8 rounds: the host's noise
        ([5.78, 6.4, 5.95, 6.3, 5.9, 6.6, 5.8, 6.0], False),
        # faster in 7 of 8 rounds, and by more than the margin at best: off
        ([5.7, 5.8, 5.75, 5.9, 5.9, 6.5, 5.8, 5.85], True),
    ],
)
def test_the_lm_head_rewrite_goes_only_when_faster_without_it_in_most_rounds(
    tmp_path, off_rounds, recorded
):
    import types

    import torch

    from kernelpro_backend.cache import KernelCache
    from kernelpro_backend.warmup import incontext

    on_rounds = [5.89, 6.1, 6.0, 6.2, 5.95, 6.3, 5.9, 6.6]
    steps = _InTurns([[[6.0] * 8], [on_rounds, off_rounds]])
    steps.served = {}
    steps.sessions = [
        types.SimpleNamespace(fingerprint="f" * 32, rewrites={"linear_cross_entropy": 1})
    ]
    lines: list[str] = []
    with KernelCache(tmp_path / "c") as cache:
        incontext._judge(torch.nn.Linear(2, 2), _Finder(cache), steps, [], lines)
        faster = sum(b < a for a, b in zip(on_rounds, off_rounds, strict=True))
        assert f"(faster without it in {faster} of 8 rounds)" in lines[-1]
        assert lines[-1].endswith(incontext.RECORDED) == recorded
        options = ContextVerdicts(cache.context.path).graph_options("f" * 32)
        assert (options == {"rewrite_linear_cross_entropy": False}) == recorded


@pytest.mark.parametrize(("graphs", "recorded"), [(False, {(frozenset(), False): 7}), (True, {})])
def test_no_peak_memory_is_judged_when_the_step_replays_cuda_graphs(monkeypatch, graphs, recorded):
    """A CUDA-graph replay allocates nothing, so its peak says nothing: under cuda_graphs the
    variants' peaks are not kept, and the memory rule has nothing to send kernels away for."""
    import torch

    from kernelpro_backend.warmup import incontext_steps

    monkeypatch.setattr(incontext_steps, "time_step", lambda *args: (10.0, 7))
    steps = incontext_steps.StepVariants(
        torch.nn.Linear(2, 2), (torch.randn(1, 2),), {"cuda_graphs": graphs}, sum, None, None
    )
    assert steps.time_with(frozenset()) == 10.0
    assert steps.peaks == recorded


def test_a_host_bound_step_gets_the_cuda_graphs_hint():
    from kernelpro_backend.warmup.incontext import host_bound_line

    line = host_bound_line((23.7, 24.3), graphed=False)  # GPT-2 small under kernelpro, H100
    assert line is not None and "launching it takes 23.7 of its 24.3 ms" in line
    assert "cuda_graphs" in line
    assert host_bound_line((25.1, 30.0), graphed=False) is None  # Inductor's: GPU-bound
    assert host_bound_line((23.7, 24.3), graphed=True) is None  # replayed already
    assert host_bound_line(None, graphed=False) is None  # off the GPU, or not timed in turns


@pytest.mark.parametrize(("host", "hinted"), [((5.8, 6.0), True), ((3.0, 6.0), False)])
def test_the_check_reports_whether_the_step_it_keeps_is_host_bound(tmp_path, host, hinted):
    """The hint reads the launch time of the variant the check settles on (here: its one
    kernel lost, so the step without it)."""
    import torch

    from kernelpro_backend.cache import KernelCache
    from kernelpro_backend.warmup import incontext

    steps = _InTurns([[[10.0] * 8, [9.6] * 8]])
    steps.host = {(frozenset(steps.served), False): host, (frozenset(), False): (1.0, 10.0)}
    lines: list[str] = []
    with KernelCache(tmp_path / "c") as cache:
        incontext._judge(torch.nn.Linear(2, 2), _Finder(cache), steps, ["a" * 64], lines)
    assert ("host-bound" in lines[-1]) == hinted


def test_under_cuda_graphs_the_report_says_so_after_its_verdicts(tmp_path, monkeypatch):
    import torch

    from kernelpro_backend.bench import models
    from kernelpro_backend.cache import KernelCache
    from kernelpro_backend.warmup import incontext, incontext_steps

    monkeypatch.setattr(incontext_steps, "time_step", lambda *args: (10.0, 0))
    model = models.LMHeadLoss(16, 50)
    inputs = (torch.randn(12, 16), torch.randint(0, 50, (12,)))
    opts = {"fallback": "eager", "rewrite_linear_cross_entropy": False, "cuda_graphs": True}
    with KernelCache(tmp_path / "c") as cache:
        lines = incontext.check_in_context(model, inputs, opts, lambda out: out, _Finder(cache))
    assert lines[0] == "in context: the step uses no kernelpro kernel"
    assert lines[-1] == "in context: the step replayed as CUDA graphs (its peak memory not judged)"


def test_the_check_times_its_rounds_with_nvcc_paused(monkeypatch):
    """warmup/incontext_steps.time_rounds: the warm-up and launch-timing steps first (a first
    call may compile), then the timed rounds inside the pause."""
    import contextlib

    from kernelpro_backend.warmup import incontext_steps

    events: list[str] = []

    @contextlib.contextmanager
    def paused():  # type: ignore[no-untyped-def]
        events.append("pause")
        yield 0
        events.append("resume")

    class Stepper:
        host = None

        def once(self) -> None:
            events.append("step")

    monkeypatch.setattr(incontext_steps, "nvcc_paused", paused)
    monkeypatch.setattr(incontext_steps, "ROUND_MS", 0.001)
    times, _ = incontext_steps.time_rounds([Stepper(), Stepper()], 2)
    assert [len(t) for t in times] == [2, 2]
    first = events.index("pause")
    assert events[:first] == ["step"] * 6 and events[-1] == "resume"
    assert "pause" not in events[first + 1 :] and events[first + 1 : -1].count("step") > 0


def test_no_step_starts_that_would_end_past_the_deadline(monkeypatch):
    """A whole-step compile takes about a minute on a corpus model: the check starts none that
    the longest so far says would end past the warm-up's deadline, instead of overrunning it."""
    import time

    import torch

    from kernelpro_backend.warmup import incontext_steps

    def slow_step(*args):  # type: ignore[no-untyped-def]
        time.sleep(0.3)
        return 10.0, 7

    monkeypatch.setattr(incontext_steps, "time_step", slow_step)
    steps = incontext_steps.StepVariants(
        torch.nn.Linear(2, 2), (torch.randn(1, 2),), {}, sum, None, time.perf_counter() + 0.5
    )
    assert steps.time_with(frozenset()) == 10.0  # nothing timed yet: it starts
    with pytest.raises(incontext_steps.OutOfTime, match="would end past the warm-up's deadline"):
        steps.time_with(frozenset(["a" * 64]))  # 0.3 s more would end past it


def test_the_report_shows_where_the_step_spent_its_gpu_time_with_the_kernels(tmp_path):
    """With both variants profiled, the verdict is followed by the per-kernel difference: the
    kernel that came in, the Inductor kernels it displaced or added."""
    import torch

    from kernelpro_backend.cache import KernelCache
    from kernelpro_backend.profilers.step_diff import StepProfile
    from kernelpro_backend.warmup import incontext

    steps = _InTurns([[[10.0] * 8, [9.6] * 8]])
    served = frozenset(steps.served)
    steps.profiles = {
        (frozenset(), False): StepProfile(
            {"kernel": (1, 300.0), "triton_poi_add": (2, 500.0)}, 800, 900
        ),
        (served, False): StepProfile(
            {"triton_red_fused": (1, 250.0), "triton_poi_add": (1, 250.0)}, 500, 550
        ),
    }
    lines: list[str] = []
    with KernelCache(tmp_path / "c") as cache:
        incontext._judge(torch.nn.Linear(2, 2), _Finder(cache), steps, ["a" * 64], lines)
    at = next(i for i, line in enumerate(lines) if "on the GPU, a step with the kernels" in line)
    assert "kernels 0.80 against 0.50 ms, 3 against 2 launches" in lines[at]
    assert lines[at + 1].split() == ["+0.300", "ms,", "+1", "launches", "kernel"]
    assert lines[at + 2].split()[:2] == ["+0.250", "ms,"] and "triton_poi_add" in lines[at + 2]
    assert lines[at + 3].split()[:2] == ["-0.250", "ms,"] and "triton_red_fused" in lines[at + 3]
