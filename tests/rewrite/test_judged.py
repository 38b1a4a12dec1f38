"""The in-context verdict on every compile that installs kernels (rewrite/judged.py), with a fake
clock: the rule, the alternation, the release of the loser, and the verdict cached by graph
key."""

from __future__ import annotations

import pytest
import torch

from kernelpro_backend import make_backend
from kernelpro_backend.cache.context import ContextVerdicts
from kernelpro_backend.rewrite.judged import (
    KEEP_SHARE,
    MARGIN,
    ROUNDS,
    WARMUP,
    JudgedGraph,
    decide,
    graph_key,
    symbolic,
)
from kernelpro_backend.rewrite.providers import CallableKernel, IsolatedMs
from kernelpro_backend.rewrite.verdict_plan import MAX_LEAVE_OUT, VerdictPlan

ONE = frozenset({"k"})
# Calls that settle any verdict: the all-in trial and every leave-one-out one.
SETTLE_CALLS = 2 * (WARMUP + ROUNDS) * (1 + MAX_LEAVE_OUT)


def _one_kernel(with_kernels, without, clock, outcomes):
    """A graph with one kernel "k" judged on its calls, with budget to spare."""
    plan = VerdictPlan(["k"], {}, budget_s=1e9)
    return JudgedGraph({ONE: with_kernels, frozenset(): without}, plan, clock, outcomes.append)


def test_decide_keeps_only_beyond_noise():
    assert decide([1.0] * 8, [2.0] * 8).keep
    # faster by less than the margin: the fallback keeps the graph
    assert not decide([1.0] * 8, [1.0 + MARGIN / 2] * 8).keep
    # a median well ahead, but faster in too few pairs
    few = int(KEEP_SHARE * 8) - 1
    with_ms = [1.0] * few + [3.0] * (8 - few)
    without = [2.0] * 8
    verdict = decide(with_ms, without)
    assert verdict.with_median < verdict.without_median * (1 - MARGIN)
    assert verdict.wins == few and not verdict.keep
    # slower: dropped
    assert not decide([2.0] * 8, [1.0] * 8).keep


def test_decide_under_energy_keeps_a_graph_not_slower_beyond_the_tolerance():
    """Margin -2% (objective "energy"): kept 1.5% slower, not 3% slower, nor where too few
    pairs are within the 2%; the time rule's default is unchanged."""
    assert decide([1.015] * 8, [1.0] * 8, -0.02).keep
    assert not decide([1.015] * 8, [1.0] * 8).keep
    assert not decide([1.03] * 8, [1.0] * 8, -0.02).keep
    few = int(KEEP_SHARE * 8) - 1
    spiky = decide([1.0] * few + [1.5] * (8 - few), [1.0] * 8, -0.02)
    assert spiky.with_median <= 1.02 and spiky.wins == few and not spiky.keep
    assert (
        "not slower beyond 2% with them in 8 of 8 pairs"
        in decide([1.0] * 8, [1.0] * 8, -0.02).describe()
    )


class FakeClock:
    """Each call's time is what the variant that ran said it took; `ready` False makes reads
    wait until the verdict's last call blocks on them."""

    def __init__(self, ready: bool = True) -> None:
        self.last = 0.0
        self.ready = ready
        self.waited = 0

    def start(self):
        return None

    def stop(self, token):
        return self.last

    def read(self, mark):
        return mark if self.ready else None

    def wait(self, mark):
        self.waited += 1
        return mark


def _variants(clock: FakeClock, with_ms: float, without_ms: float, ran: list[str]):
    def with_kernels(args):
        clock.last = with_ms
        ran.append("with")
        return "with"

    def without(args):
        clock.last = without_ms
        ran.append("without")
        return "without"

    return with_kernels, without


@pytest.mark.parametrize("ready", [True, False])
def test_alternates_then_keeps_the_faster(ready):
    clock, ran, verdicts = FakeClock(ready), [], []
    with_kernels, without = _variants(clock, 1.0, 2.0, ran)
    graph = _one_kernel(with_kernels, without, clock, verdicts)
    calls = 2 * (WARMUP + ROUNDS)
    for _ in range(calls):
        assert not graph.settled
        graph([])
    assert graph.settled and len(verdicts) == 1 and verdicts[0].kept == ONE
    # warm-up calls alternate, then A-B / B-A pairs: each variant ran equally often
    assert ran[: 2 * WARMUP] == ["with", "without"] * WARMUP
    assert ran[2 * WARMUP : 2 * WARMUP + 4] == ["with", "without", "without", "with"]
    assert ran.count("with") == ran.count("without") == WARMUP + ROUNDS
    # only the last timed call blocks, on whatever the device has not reached yet
    assert clock.waited == (2 * ROUNDS if not ready else 1)
    ran.clear()
    assert [graph([]) for _ in range(3)] == ["with"] * 3 and ran == ["with"] * 3


def test_slower_kernels_are_dropped_and_released():
    clock, ran, verdicts = FakeClock(), [], []
    with_kernels, without = _variants(clock, 2.0, 1.0, ran)
    graph = _one_kernel(with_kernels, without, clock, verdicts)
    for _ in range(2 * (WARMUP + ROUNDS)):
        graph([])
    assert not verdicts[0].kept
    assert graph([]) == "without"
    assert graph._variants == {}  # neither variant is held beside the chosen one


def test_graph_key_names_code_layout_and_kernels():
    x = torch.randn(4, 6)
    base = graph_key("code", [x], ["k1"])
    assert base == graph_key("code", [x.clone()], ["k1"])
    assert base != graph_key("code2", [x], ["k1"])
    assert base != graph_key("code", [x.t().contiguous().t()], ["k1"])  # other strides
    assert base != graph_key("code", [x], ["k2"])
    # objective "energy"'s verdicts are not the time rule's (a cache shared by both)
    assert base != graph_key("code", [x], ["k1"], 0.02) == graph_key("code", [x], ["k1"], 0.02)


class Scaled:
    """A provider whose kernels run each subgraph's own reference and count their calls; its
    `cache.context` keeps verdicts on disk as the real cache does."""

    def __init__(self, context: ContextVerdicts) -> None:
        self.calls = 0
        self.cache = type("Cache", (), {"context": context})()

    def find(self, subgraph):
        module = subgraph.module()

        def run(*args):
            self.calls += 1
            return module(*args)

        return CallableKernel("counted", run)

    def isolated_ms(self, subgraph):
        return IsolatedMs(0.5, 1.0)


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x * 2.0, dim=-1) + 1


@pytest.mark.parametrize("kernel_ms, kept", [(1.0, True), (3.0, False)])
def test_compile_judges_and_later_compiles_reuse_the_verdict(tmp_path, kernel_ms, kept):
    """A compile judges its graph on its first calls; the verdict goes to the cache; a new
    compile of the same graph with the same kernels compiles only the winner."""
    context = ContextVerdicts(tmp_path / "context.json")
    provider = Scaled(context)

    class Clock(FakeClock):
        def stop(self, token):
            return kernel_ms if provider.calls > self.seen else 2.0

        def start(self):
            self.seen = provider.calls

    x = torch.randn(8, 16)
    expected = Model()(x)
    sessions: list = []
    backend = make_backend(provider=provider, sessions=sessions, clock=Clock())
    compiled = torch.compile(Model(), backend=backend, options={"fallback": "eager"})
    with torch.no_grad():
        for _ in range(SETTLE_CALLS):
            torch.testing.assert_close(compiled(x), expected)
    [report] = [r for s in sessions for r in s.reports if r.replaced]
    assert len(report.replaced) == 2  # the all-in trial, then one leave-one-out trial each
    assert report.in_context == ("kept" if kept else "dropped")
    assert report.verdict is not None and report.verdict["keep"] is kept
    assert set(report.isolated.values()) == {IsolatedMs(0.5, 1.0)}
    recorded = [v for k, v in context._load().items() if k.startswith("judged:")]
    assert len(recorded) == 1 and recorded[0]["keep"] is kept
    before = provider.calls
    with torch.no_grad():
        compiled(x)
    assert (provider.calls > before) is kept

    # A fresh process's compile of the same graph reads the verdict: no more turns.
    torch._dynamo.reset()
    provider.calls = 0
    again = Scaled(ContextVerdicts(tmp_path / "context.json"))
    sessions.clear()
    backend = make_backend(provider=again, sessions=sessions, clock=Clock())
    with torch.no_grad():
        torch.testing.assert_close(
            torch.compile(Model(), backend=backend, options={"fallback": "eager"})(x), expected
        )
    assert (again.calls > 0) is kept
    [report] = [r for s in sessions for r in s.reports if r.replaced]
    assert report.in_context == ("kept" if kept else "dropped")


def test_option_off_makes_no_verdict(tmp_path):
    provider = Scaled(ContextVerdicts(tmp_path / "context.json"))
    sessions: list = []
    backend = make_backend(provider=provider, sessions=sessions, clock=FakeClock())
    compiled = torch.compile(
        Model(), backend=backend, options={"fallback": "eager", "in_context": False}
    )
    with torch.no_grad():
        compiled(torch.randn(8, 16))
        per_call = provider.calls
        for _ in range(3):
            compiled(torch.randn(8, 16))
    assert per_call > 0 and provider.calls == 4 * per_call  # every call ran the kernels
    assert all(r.in_context == "" for s in sessions for r in s.reports)


def test_inductor_training_judges_forward_and_backward(tmp_path):
    """Under the Inductor fallback, the forward and backward graphs of a training step are each
    judged (both variants compiled by Inductor, called with AOTAutograd's boxed inputs); the
    step matches eager throughout the turns and after."""
    context = ContextVerdicts(tmp_path / "context.json")
    provider = Scaled(context)
    clock = FakeClock()  # every call "takes" 0 ms: equal, so the fallback keeps each graph
    sessions: list = []
    backend = make_backend(provider=provider, sessions=sessions, clock=clock)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16))
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(8, 16)
    for _ in range(SETTLE_CALLS + 1):
        model.zero_grad()
        compiled(x).square().sum().backward()
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        model(x).square().sum().backward()
        for a, b in zip(got, [p.grad for p in model.parameters()], strict=True):
            torch.testing.assert_close(a, b)
    judged = [r for s in sessions for r in s.reports if r.replaced]
    assert {r.graph for r in judged} == {"forward", "backward"}
    assert all(r.in_context == "dropped" for r in judged)
    assert len([k for k in context._load() if k.startswith("judged:")]) == 2


def test_a_graph_with_symbolic_sizes_is_not_judged(tmp_path):
    """Its calls come at different sizes: two calls' times compare nothing."""
    provider = Scaled(ContextVerdicts(tmp_path / "context.json"))
    sessions: list = []
    backend = make_backend(provider=provider, sessions=sessions, clock=FakeClock())
    compiled = torch.compile(Model(), backend=backend, options={"fallback": "eager"}, dynamic=True)
    with torch.no_grad():
        for n in (8, 12, 8):
            x = torch.randn(n, 16)
            torch.testing.assert_close(compiled(x), Model()(x))
    assert sessions and all(r.in_context == "" for s in sessions for r in s.reports)
    assert not symbolic([torch.randn(2)])


def test_graphs_replayed_as_cuda_graphs_are_not_judged(tmp_path):
    """Under Inductor's CUDA graphs (mode="reduce-overhead", cuda_graphs) both variants would
    be recorded: no verdict is made there."""
    provider = Scaled(ContextVerdicts(tmp_path / "context.json"))
    sessions: list = []
    backend = make_backend(provider=provider, sessions=sessions, clock=FakeClock())
    compiled = torch.compile(Model(), backend=backend, options={"cuda_graphs": True})
    x = torch.randn(8, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), Model()(x))
    reports = [r for s in sessions for r in s.reports if r.replaced]
    assert reports and all(r.in_context == "" for r in reports)
    assert all(s.replayed for s in sessions)


class PerKind:
    """A provider serving one kernel per subgraph kind (this Model: "pointwise", "reduction"),
    counting each one's calls; `isolated` gives its figures alone by kind."""

    def __init__(self, context: ContextVerdicts, isolated: dict | None = None) -> None:
        self.calls = {"pointwise": 0, "reduction": 0}
        self.isolated = isolated or {}
        self.cache = type("Cache", (), {"context": context})()

    def find(self, subgraph):
        module, kind = subgraph.module(), subgraph.kind

        def run(*args):
            self.calls[kind] += 1
            return module(*args)

        return CallableKernel(kind, run)

    def isolated_ms(self, subgraph):
        return self.isolated.get(subgraph.kind)


class KindClock(FakeClock):
    """A call "takes" 2 ms plus the delta of each kernel that ran in it."""

    def __init__(self, provider: PerKind, deltas: dict[str, float]) -> None:
        super().__init__()
        self.provider, self.deltas = provider, deltas

    def start(self):
        return dict(self.provider.calls)

    def stop(self, token):
        ran = [k for k, n in self.provider.calls.items() if n > token[k]]
        return 2.0 + sum(self.deltas[k] for k in ran)


def _run_model(provider, clock, calls: int, options: dict | None = None) -> list:
    sessions: list = []
    backend = make_backend(provider=provider, sessions=sessions, clock=clock)
    compiled = torch.compile(
        Model(), backend=backend, options={"fallback": "eager", **(options or {})}
    )
    x = torch.randn(8, 16)
    with torch.no_grad():
        for _ in range(calls):
            torch.testing.assert_close(compiled(x), Model()(x))
    return [r for s in sessions for r in s.reports]


def test_a_graph_keeps_the_kernels_that_win_in_context_and_a_later_compile_only_those(tmp_path):
    """The softmax kernel makes the graph slower, the pointwise one faster: the graph with both
    loses to the fallback's, the one without the softmax kernel wins; it is kept, recorded with
    its kernel ids, and a fresh compile installs the pointwise kernel alone, untimed."""
    context = ContextVerdicts(tmp_path / "context.json")
    provider = PerKind(context)
    deltas = {"pointwise": -0.2, "reduction": 0.5}
    [report] = _run_model(provider, KindClock(provider, deltas), SETTLE_CALLS)
    [pointwise] = [k for k in report.replaced if k.endswith("/pointwise")]
    [softmax] = [k for k in report.replaced if k.endswith("/reduction")]
    assert report.in_context == "partial" and report.dropped == [softmax]
    assert report.verdict is not None and report.verdict["kept"] == [pointwise]
    [recorded] = [v for k, v in context._load().items() if k.startswith("judged:")]
    assert recorded["kept"] == [pointwise] and softmax in recorded["dropped"]

    torch._dynamo.reset()
    again = PerKind(ContextVerdicts(tmp_path / "context.json"))
    [report] = _run_model(again, KindClock(again, deltas), 3)
    assert report.in_context == "partial" and report.dropped == [softmax]
    assert again.calls["pointwise"] == 3 and again.calls["reduction"] == 0


@pytest.mark.parametrize("delta, kept", [(-0.5, True), (0.5, False)])
def test_a_near_tie_is_installed_tentatively_and_the_verdict_decides(tmp_path, delta, kept):
    """The softmax kernel tied with the fallback alone (tentative): installed in a judged graph,
    kept where in context it makes the graph faster, dropped where slower."""
    tie = {"reduction": IsolatedMs(1.0, 1.0, tentative=True), "pointwise": IsolatedMs(0.5, 1.0)}
    provider = PerKind(ContextVerdicts(tmp_path / "context.json"), tie)
    deltas = {"pointwise": -0.2, "reduction": delta}
    [report] = _run_model(provider, KindClock(provider, deltas), SETTLE_CALLS)
    [softmax] = [k for k in report.replaced if k.endswith("/reduction")]
    assert report.isolated[softmax].tentative
    assert report.in_context == ("kept" if kept else "partial")
    assert (softmax in report.dropped) is not kept


def test_a_near_tie_is_not_installed_where_no_verdict_is_made(tmp_path):
    """With the in-context verdict off, a tentative kernel stays out: today's rule."""
    tie = {"reduction": IsolatedMs(1.0, 1.0, tentative=True), "pointwise": IsolatedMs(0.5, 1.0)}
    provider = PerKind(ContextVerdicts(tmp_path / "context.json"), tie)
    [report] = _run_model(provider, FakeClock(), 2, {"in_context": False})
    assert [k.rsplit("/", 1)[1] for k in report.replaced] == ["pointwise"]
    assert provider.calls["reduction"] == 0 and provider.calls["pointwise"] == 2


def test_under_energy_a_graph_keeps_kernels_within_the_tolerance_and_time_judges_again(tmp_path):
    """The softmax kernel makes the 2 ms graph 1% slower: a compile under objective "energy"
    keeps it (within 2%), one under "time", with the same cache, judges anew and drops it."""
    context = tmp_path / "context.json"
    deltas = {"pointwise": 0.0, "reduction": 0.02}
    provider = PerKind(ContextVerdicts(context))
    [report] = _run_model(provider, KindClock(provider, deltas), SETTLE_CALLS,
                          {"objective": "energy"})  # fmt: skip
    assert report.in_context == "kept" and report.verdict["margin"] == -0.02
    torch._dynamo.reset()
    timed = PerKind(ContextVerdicts(context))
    [report] = _run_model(timed, KindClock(timed, deltas), SETTLE_CALLS)
    assert report.in_context == "dropped" and "margin" not in report.verdict
