"""The runner flags a mode whose outputs or gradients differ from eager (so the bench's
"ok" means something), and keeps going when a mode raises."""

import contextlib
import time

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

from kernelpro_backend.bench.modes import EAGER, Mode, make_modes
from kernelpro_backend.bench.runner import RunConfig, run_workload, run_workloads
from kernelpro_backend.bench.workloads import WORKLOADS

CPU = torch.device("cpu")


def _scale_outputs(factor: float):
    def compiler(gm, example_inputs):
        def run(*args):
            outs = gm(*args)
            return [o * factor if isinstance(o, torch.Tensor) else o for o in outs]

        return make_boxed_func(run)

    return compiler


def _identity(gm, example_inputs):
    return make_boxed_func(gm.forward)


def _config(mode: Mode) -> RunConfig:
    return RunConfig([make_modes([EAGER])[0], mode], cpu_reps=1, progress=lambda line: None)


def test_wrong_forward_output_is_flagged():
    def backend(gm, example_inputs):
        return lambda *args: [o + 1e-2 for o in gm(*args)]

    result = run_workload(WORKLOADS["softmax"](CPU, None, "tiny"), _config(Mode("bad", backend)))
    bad = result.mode("bad")
    assert bad is not None and bad.status == "wrong"
    assert "out:" in bad.message and bad.max_abs_err > 9e-3
    assert result.speedup("bad", EAGER) is None  # wrong modes get no speedup


def test_wrong_gradient_is_flagged_even_when_the_forward_is_right():
    backend = aot_autograd(fw_compiler=_identity, bw_compiler=_scale_outputs(1.01))
    result = run_workload(WORKLOADS["mlp"](CPU, None, "tiny"), _config(Mode("badgrad", backend)))
    bad = result.mode("badgrad")
    assert bad is not None and bad.status == "wrong"
    assert "grad." in bad.message and "out" not in bad.message.split(":")[0]


def test_a_correct_compiled_training_step_matches_and_is_timed():
    backend = aot_autograd(fw_compiler=_identity, bw_compiler=_identity)
    result = run_workload(WORKLOADS["convnet"](CPU, None, "tiny"), _config(Mode("aot", backend)))
    assert [m.status for m in result.modes] == ["ok", "ok"]
    assert all(m.median_ms and m.median_ms > 0 for m in result.modes)
    assert result.speedup("aot", EAGER) is not None


def test_a_mode_that_raises_is_failed_and_the_rest_still_runs():
    def backend(gm, example_inputs):
        raise RuntimeError("backend exploded")

    config = _config(Mode("boom", backend))
    config.modes.append(Mode("eager-again", None))
    result = run_workload(WORKLOADS["layer_norm"](CPU, None, "tiny"), config)
    statuses = {m.mode: m.status for m in result.modes}
    assert statuses == {"eager": "ok", "boom": "failed", "eager-again": "ok"}
    assert "backend exploded" in result.mode("boom").message


def test_sol_hook_gives_percent_of_speed_of_light():
    config = RunConfig(make_modes([EAGER]), cpu_reps=1, sol_fn=lambda w: 1e-6)
    result = run_workload(WORKLOADS["softmax"](CPU, None, "tiny"), config)
    eager = result.mode(EAGER)
    assert result.sol_ms == 1e-6
    assert result.sol_fraction(EAGER) == 1e-6 / eager.median_ms


def test_kernelpro_is_registered_from_a_source_checkout(monkeypatch):
    """Without the pip entry point, the bench registers kernelpro's backend under its name."""
    from torch._dynamo.backends import registry

    from kernelpro_backend.backend import kernelpro
    from kernelpro_backend.bench.modes import ensure_kernelpro_registered

    registered = {}

    def not_found(name):
        raise registry.InvalidBackend(name)

    monkeypatch.setattr(registry, "list_backends", lambda exclude_tags=(): [])
    monkeypatch.setattr(registry, "lookup_backend", not_found)
    monkeypatch.setattr(
        registry, "register_backend", lambda fn, name: registered.setdefault(name, fn)
    )
    ensure_kernelpro_registered()
    assert registered == {"kernelpro": kernelpro}


def test_modes_run_in_the_order_given_with_eager_first():
    names = [
        m.name for m in make_modes(["kernelpro", "inductor-max-autotune", "eager", "inductor"])
    ]
    assert names == ["eager", "kernelpro", "inductor-max-autotune", "inductor"]


def test_each_workload_is_reported_once_when_final_and_a_failed_build_too():
    def backend(gm, example_inputs):
        raise RuntimeError("backend exploded")

    def broken_build():
        raise ValueError("no such shape")

    seen = []
    config = _config(Mode("boom", backend))
    config.on_workload = seen.append
    returned = run_workloads(
        [("softmax", lambda: WORKLOADS["softmax"](CPU, None, "tiny")), ("bad", broken_build)],
        config,
    )
    assert seen == returned  # each once, the final result, as it finished
    assert [(m.mode, m.status) for m in seen[0].modes] == [("eager", "ok"), ("boom", "failed")]
    assert (
        seen[0].mode("eager").median_ms > 0 and "provisional" not in seen[0].mode("eager").message
    )
    assert [m.status for m in seen[1].modes] == ["failed", "failed"]
    assert "no such shape" in seen[1].modes[0].message


def test_each_compile_is_watched_and_a_failed_one_still_leaves_the_watch():
    events = []

    @contextlib.contextmanager
    def watch(workload, mode):
        events.append(("start", workload.name, mode))
        try:
            yield
        finally:
            events.append(("end", workload.name, mode))

    def backend(gm, example_inputs):
        raise RuntimeError("backend exploded")

    config = _config(Mode("boom", backend))
    config.watch_compile = watch
    run_workload(WORKLOADS["softmax"](CPU, None, "tiny"), config)
    assert events == [
        ("start", "softmax", "eager"), ("end", "softmax", "eager"),
        ("start", "softmax", "boom"), ("end", "softmax", "boom"),
    ]  # fmt: skip


def test_modes_are_timed_in_interleaved_rounds_after_all_compiled():
    calls: list[str] = []

    def tagged(tag):
        def backend(gm, example_inputs):
            def run(*args):
                calls.append(tag)
                return gm(*args)

            return run

        return backend

    config = RunConfig(
        [make_modes([EAGER])[0], Mode("a", tagged("a")), Mode("b", tagged("b"))],
        cpu_reps=1,
        rounds=3,
        progress=lambda line: None,
    )
    result = run_workload(WORKLOADS["softmax"](CPU, None, "tiny"), config)
    assert [m.status for m in result.modes] == ["ok", "ok", "ok"]
    assert all(m.median_ms and m.median_ms > 0 for m in result.modes)
    # compile + check (one call each), then 3 rounds of (untimed + timed) per mode, alternating
    assert calls == ["a", "b"] + ["a", "a", "b", "b"] * 3


def test_kernels_used_counts_replaced_subgraphs_over_every_compile():
    from types import SimpleNamespace

    from kernelpro_backend.bench.sessions import kernels_used
    from kernelpro_backend.rewrite.graph import RewriteReport

    forward = RewriteReport("forward", subgraphs=5, replaced=["a/k1", "b/k2"])
    backward = RewriteReport("backward", subgraphs=7, replaced=["c/k3"])
    sessions = [SimpleNamespace(reports=[forward]), SimpleNamespace(reports=[backward])]
    assert kernels_used(sessions) == "3/12"
    # a per-kernel in-context verdict dropped one of the forward graph's two kernels
    forward.in_context, forward.dropped = "partial", ["b/k2"]
    assert kernels_used(sessions) == "2/12, 1 dropped in context"
    assert kernels_used([]) == "0/0"
    assert kernels_used(None) == ""  # not kernelpro


def test_graph_verdicts_carry_each_kernels_isolated_figures_and_fate():
    from types import SimpleNamespace

    from kernelpro_backend.bench.sessions import graph_verdicts
    from kernelpro_backend.rewrite.graph import RewriteReport
    from kernelpro_backend.rewrite.providers import IsolatedMs

    report = RewriteReport("forward", subgraphs=2, replaced=["a/k1", "b/k2"])
    report.isolated = {"a/k1": IsolatedMs(0.5, 0.8), "b/k2": IsolatedMs(2.0, 2.0, True)}
    report.in_context, report.dropped = "partial", ["b/k2"]
    [graph] = graph_verdicts([SimpleNamespace(reports=[report])])
    assert graph["isolated"] == {"a/k1": [0.5, 0.8], "b/k2": [2.0, 2.0]}
    assert graph["tentative"] == ["b/k2"] and graph["dropped"] == ["b/k2"]
    assert graph["in_context"] == "partial" and graph["kernels"] == 2


def test_rewrites_made_sums_every_graphs_rewrites_and_names_those_a_verdict_turned_off():
    from types import SimpleNamespace

    from kernelpro_backend.bench.sessions import rewrites_made

    first = SimpleNamespace(rewrites={"attention": 2, "linear_cross_entropy": 0}, turned_off={})
    second = SimpleNamespace(
        rewrites={"attention": 2}, turned_off={"rewrite_linear_cross_entropy": False}
    )
    assert rewrites_made([first]) == "attention 2"
    assert rewrites_made([first, second]) == (
        "attention 4; off by the warm-up's verdict: rewrite_linear_cross_entropy"
    )
    assert rewrites_made([SimpleNamespace(rewrites={}, turned_off={})]) == "none"
    assert rewrites_made(None) == ""  # not kernelpro


def test_the_lines_a_run_writes_as_it_goes_merge_into_its_final_results(tmp_path):
    """What `on_workload` hears, written as JSON lines, reads back (bench/merge.py) as exactly
    the run's final results."""
    from kernelpro_backend.bench import tables
    from kernelpro_backend.bench.merge import workloads_from_jsonl

    path = tmp_path / "workloads.jsonl"
    config = _config(Mode("again", None))
    config.on_workload = lambda result: tables.append_jsonl(result, path)
    final = run_workloads(
        [(n, lambda n=n: WORKLOADS[n](CPU, None, "tiny")) for n in ("softmax", "layer_norm")],
        config,
    )
    assert len(path.read_text().splitlines()) == 2  # one line per workload, no others
    assert workloads_from_jsonl(path.read_text()) == final


def test_the_steady_rate_runs_steps_back_to_back_and_is_wall_time_per_step():
    from kernelpro_backend.bench.timing import steady_ms

    calls = []

    def step():
        calls.append(1)
        time.sleep(0.002)

    ms = steady_ms(step, CPU, step_ms=2.0, window_ms=40.0)
    assert len(calls) == 3 + 20  # three untimed, then window / step time
    assert 2.0 <= ms < 10.0
    calls.clear()
    steady_ms(step, CPU, step_ms=50.0, window_ms=40.0)
    assert len(calls) == 3 + 10  # never fewer than ten timed


def test_training_steps_get_a_steady_rate_where_the_gpu_runs_them(monkeypatch):
    """The steady rate is measured for training workloads on CUDA only: on the CPU the
    perf_counter median already is the wall time, and an inference call has no step loop."""
    import kernelpro_backend.bench.runner as runner

    seen = []
    monkeypatch.setattr(runner, "steady_ms", lambda step, device, ms: seen.append(ms) or 7.0)
    backend = aot_autograd(fw_compiler=_identity, bw_compiler=_identity)
    work = WORKLOADS["convnet"](CPU, None, "tiny")
    result = run_workload(work, _config(Mode("aot", backend)))
    assert all(m.steady_ms is None for m in result.modes) and not seen
    config = _config(Mode("aot", backend))
    medians, steadies, errors = runner._time_interleaved(
        {"a": lambda: None}, CPU, config, steady=True
    )
    assert steadies == {"a": 7.0} and not errors and len(seen) == config.rounds


def test_kernelpro_with_cuda_graphs_passes_its_mode_and_options_to_the_backend(monkeypatch):
    # torch.compile refuses a mode and options together; kernelpro's backend takes both
    from kernelpro_backend.bench import modes

    compiled = []
    monkeypatch.setattr(modes.torch, "compile", lambda model, **kw: compiled.append(kw) or model)
    (_, graphs) = make_modes([modes.KERNELPRO_GRAPHS], {"search": "cache-only"})
    graphs.wrap(torch.nn.Linear(2, 2), sessions=[])
    (kw,) = compiled
    assert set(kw) == {"backend"}
    assert kw["backend"].keywords == {
        "mode": "reduce-overhead", "options": {"search": "cache-only"}
    }  # fmt: skip
    (_, inductor) = make_modes([modes.INDUCTOR_GRAPHS])
    inductor.wrap(torch.nn.Linear(2, 2))
    assert compiled[1] == {"backend": "inductor", "mode": "reduce-overhead", "options": None}
    with pytest.raises(ValueError, match="known modes"):
        make_modes(["kernelpro-graphs"])


def test_a_step_under_cuda_graphs_reports_no_peak_memory(monkeypatch):
    # a replay allocates nothing: its tensors were allocated in the graphs' pool when recorded
    from kernelpro_backend.bench import runner

    monkeypatch.setattr(runner, "step_peak_mib", lambda step, device: 12.0)
    graphed = Mode("graphed", "eager", "reduce-overhead")
    result = run_workload(WORKLOADS["softmax"](CPU, None, "tiny"), _config(graphed))
    peaks = {m.mode: m.step_peak_mib for m in result.modes}
    assert peaks == {"eager": 12.0, "graphed": None}


def test_launch_timing_takes_medians_of_steps_started_idle():
    from kernelpro_backend.runtime.timing import launch_timing

    calls = []

    def step():
        calls.append(1)
        time.sleep(0.002)

    launch, total = launch_timing(step, CPU, reps=3)
    assert len(calls) == 3
    assert 2.0 <= launch <= total  # on the CPU nothing runs after the call returns


def test_a_mode_replays_cuda_graphs_by_its_mode_or_kernelpros_option(monkeypatch):
    from kernelpro_backend.bench import modes

    monkeypatch.delenv("KERNELPRO_CUDA_GRAPHS", raising=False)
    plain, graphs = make_modes([modes.KERNELPRO, modes.INDUCTOR_GRAPHS])[1:]
    assert not plain.graphed and graphs.graphed
    (_, opted) = make_modes([modes.KERNELPRO], {"cuda_graphs": True})
    assert opted.graphed
    monkeypatch.setenv("KERNELPRO_CUDA_GRAPHS", "1")
    assert plain.graphed and not make_modes([modes.INDUCTOR])[1].graphed


def test_a_float64_reference_that_does_not_fit_leaves_the_check_to_eager(monkeypatch):
    """A library model's float64 step can need 100+ GiB: out of memory there ends neither the
    run nor the check; a mismatch says the reference was missing."""
    from kernelpro_backend.bench import runner
    from kernelpro_backend.bench.check import reference

    def no_room(workload):
        raise torch.OutOfMemoryError("CUDA out of memory (test)")

    monkeypatch.setattr(reference, "fp64_reference", no_room)
    monkeypatch.setattr(runner, "needs_fp64", lambda tensors, reference: True)
    backend = aot_autograd(fw_compiler=_identity, bw_compiler=_scale_outputs(1.01))
    result = run_workload(WORKLOADS["mlp"](CPU, None, "tiny"), _config(Mode("badgrad", backend)))
    bad = result.mode("badgrad")
    assert bad is not None and bad.status == "wrong"
    assert bad.message.endswith("(no float64 reference: out of memory)")


def test_a_step_under_autocast_takes_its_reference_right_after_eager(monkeypatch):
    """A mixed-precision step's reference is run before any compiled mode exists: after them
    (their models and optimizers resident) a 0.5B model's float32 run no longer fit an H100."""
    from kernelpro_backend.bench import runner
    from kernelpro_backend.bench.workload import Workload

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.autocast = torch.nn.Linear(8, 8), torch.bfloat16

        def forward(self, x):
            with torch.autocast("cpu", dtype=self.autocast):
                return self.lin(x)

    events: list[str] = []
    prepare = runner.prepare_mode

    def prepare_logged(workload, mode, sessions):
        events.append(f"prepare {mode.name}")
        return prepare(workload, mode, sessions)

    def reference_logged(workload):
        events.append("reference")
        return None, " (no float64 reference: test)"

    monkeypatch.setattr(runner, "prepare_mode", prepare_logged)
    monkeypatch.setattr(runner, "fp64_or_none", reference_logged)
    torch.manual_seed(0)
    workload = Workload("step", Step(), (torch.randn(4, 8),), torch.bfloat16, "tiny")
    backend = aot_autograd(fw_compiler=_identity, bw_compiler=_identity)
    run_workload(workload, _config(Mode("other", backend)))
    assert events == ["prepare eager", "reference", "prepare other"]
