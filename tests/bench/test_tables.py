import json

import pytest

from kernelpro_backend.bench import plots, tables
from kernelpro_backend.bench.results import BenchReport, ModeResult, WorkloadResult, per_problem


def _report():
    modes = [
        ModeResult("eager", "ok", median_ms=2.0, compile_s=0.1),
        ModeResult("inductor", "ok", median_ms=1.0, compile_s=5.0),
        ModeResult("kernelpro", "wrong", median_ms=0.5, compile_s=6.0,
                   max_abs_err=float("inf"), message="out: got (3,)"),
    ]  # fmt: skip
    w = WorkloadResult("softmax", "inference", "float32", "full", "builtin", modes, sol_ms=0.25)
    return BenchReport("cuda", "H100", {"torch": "2.11"}, "full", [m.mode for m in modes], {}, [w])


def test_speedups_sol_and_geomeans():
    r = _report()
    w = r.workloads[0]
    assert w.speedup("inductor", "eager") == 2.0
    assert w.speedup("kernelpro", "eager") is None  # wrong: no speedup
    assert w.sol_fraction("inductor") == 0.25
    assert r.geomean_speedup("inductor", "eager") == 2.0
    assert r.geomean_speedup("kernelpro", "eager") is None


def test_json_is_strict_and_console_lists_what_is_not_ok(tmp_path):
    r = _report()
    tables.write_json(r, tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text())  # strict parse: no Infinity
    km = data["workloads"][0]["modes"][2]
    assert km["max_abs_err"] == "inf" and km["status"] == "wrong"
    assert data["workloads"][0]["modes"][1]["sol_fraction"] == 0.25
    text = tables.format_console(r)
    assert "softmax / kernelpro: wrong: out: got (3,)" in text
    assert "25.0%" in text and "2.00x" in text
    md = tables.format_markdown(r)
    assert (
        "| softmax | inference | float32 | inductor | ok | 1 | 2.00x | 1.00x | - | 25.0% | - | 5.0 |"
        in md
    )


def test_the_paired_rounds_give_each_speedup_its_lowest_and_highest():
    """Round i of every mode is timed back to back: the per-round ratios say whether a mode is
    slower than Inductor beyond the run's noise (every round slower) or inside it."""
    modes = [
        ModeResult("eager", "ok", median_ms=3.0, round_ms=[3.0, 3.1, 2.9]),
        ModeResult("inductor", "ok", median_ms=2.0, round_ms=[2.0, 2.4, 1.9]),
        ModeResult("kernelpro", "ok", median_ms=2.1, round_ms=[2.1, 2.0, 2.2]),
    ]
    w = WorkloadResult("mini_gpt", "training", "bfloat16", "full", "builtin", modes)
    lo, hi = w.speedup_range("kernelpro", "inductor")
    assert (round(lo, 3), round(hi, 3)) == (0.864, 1.2)  # slower in two rounds, faster in one
    assert w.speedup_range("inductor", "inductor") == (1.0, 1.0)
    assert w.speedup_range("kernelpro", "missing") is None
    report = BenchReport("cuda", "H100", {}, "full", [m.mode for m in modes], {}, [w])
    text = tables.format_console(report)
    assert "0.95x [0.86-1.20]" in text and "1.00x [" not in text  # Inductor: no range of itself
    back = WorkloadResult.from_dict(json.loads(json.dumps(w.to_dict())))
    assert back.mode("kernelpro").round_ms == [2.1, 2.0, 2.2]
    assert w.to_dict()["modes"][2]["speedup_vs_inductor_range"] == w.speedup_range(
        "kernelpro", "inductor"
    )


def test_kernelpro_under_cuda_graphs_is_also_measured_against_inductor_under_them():
    modes = [
        ModeResult("eager", "ok", median_ms=9.0, round_ms=[9.0, 9.0]),
        ModeResult("inductor", "ok", median_ms=6.0, round_ms=[6.0, 6.0]),
        ModeResult("inductor-reduce-overhead", "ok", median_ms=4.0, round_ms=[4.0, 4.4]),
        ModeResult("kernelpro-reduce-overhead", "ok", median_ms=3.2, round_ms=[3.2, 4.0]),
    ]
    w = WorkloadResult("mini_gpt", "training", "bfloat16", "full", "builtin", modes)
    entry = w.to_dict()["modes"][3]
    assert entry["like_for_like"]["over"] == "inductor-reduce-overhead"
    assert entry["like_for_like"]["speedup"] == 4.0 / 3.2
    assert entry["like_for_like"]["range"] == (1.1, 1.25)
    assert "like_for_like" not in w.to_dict()["modes"][2]
    report = BenchReport("cuda", "H100", {}, "full", [m.mode for m in modes], {}, [w])
    text = tables.format_console(report)
    assert (
        "mini_gpt: kernelpro-reduce-overhead 1.25x [1.10-1.25] vs inductor-reduce-overhead "
        "(like for like)" in text
    )


def test_a_step_whose_launches_take_most_of_it_is_called_host_bound():
    modes = [
        ModeResult("eager", "ok", median_ms=9.0, launch_ms=5.0, launched_step_ms=9.0),
        ModeResult("inductor", "ok", median_ms=30.0, launch_ms=25.13, launched_step_ms=30.03,
                   steady_ms=30.0),
        ModeResult("kernelpro", "ok", median_ms=20.0, launch_ms=23.72, launched_step_ms=24.32,
                   steady_ms=24.0),
    ]  # fmt: skip
    w = WorkloadResult("gpt2_small", "training", "bfloat16", "full", "builtin", modes)
    report = BenchReport("cuda", "H100", {}, "full", [m.mode for m in modes], {}, [w])
    # the event-timed medians say 1.50x; the loop runs at the back-to-back rate, 1.25x
    assert tables.host_bound(report) == [
        "gpt2_small / kernelpro: host-bound: launching a step takes 23.72 of its 24.32 ms; "
        "back to back 1.25x vs inductor"
    ]
    assert w.to_dict()["modes"][2]["steady_speedup_vs_inductor"] == 1.25
    assert w.steady_speedup("eager", "inductor") is None  # eager has no steady rate here
    assert "host-bound (GPU-side gains" in tables.format_console(report)
    back = WorkloadResult.from_dict(json.loads(json.dumps(w.to_dict())))
    assert back.mode("kernelpro").launch_ms == 23.72


def test_the_rewrites_each_kernelpro_mode_was_compiled_with_are_listed_and_kept():
    modes = [
        ModeResult("inductor", "ok", median_ms=6.0),
        ModeResult(
            "kernelpro", "ok", median_ms=5.0, rewrites="attention 4, linear_cross_entropy 1"
        ),
    ]
    w = WorkloadResult("mini_gpt", "training", "bfloat16", "full", "builtin", modes)
    report = BenchReport("cuda", "H100", {}, "full", [m.mode for m in modes], {}, [w])
    text = tables.format_console(report)
    assert (
        "torch-level rewrites:\n  mini_gpt / kernelpro: attention 4, linear_cross_entropy 1" in text
    )
    assert "- mini_gpt / kernelpro: attention 4" in tables.format_markdown(report)
    back = WorkloadResult.from_dict(json.loads(json.dumps(w.to_dict())))
    assert back.mode("kernelpro").rewrites == "attention 4, linear_cross_entropy 1"
    assert back.mode("inductor").rewrites == ""


def test_regret_lists_slower_workloads_and_dropped_kernels_with_both_figures():
    dropped = {
        "graph": "inference",
        "kernels": 1,
        "in_context": "dropped",
        "verdict": {"keep": False, "with_ms": 2.1, "without_ms": 2.0, "wins": 1, "rounds": 8},
        "isolated": {"abc/k": [0.5, 0.8]},
    }
    kept = {**dropped, "in_context": "kept", "verdict": {**dropped["verdict"], "keep": True}}

    def workload(name, kernelpro_ms, graphs):
        modes = [
            ModeResult("inductor", "ok", median_ms=1.0),
            ModeResult("kernelpro", "ok", median_ms=kernelpro_ms, graphs=graphs),
        ]
        return WorkloadResult(name, "inference", "float32", "full", "kb", modes)

    report = BenchReport(
        "cuda", "H100", {}, "full", ["inductor", "kernelpro"], {},
        [workload("slower", 1.05, [kept]), workload("dropped", 1.0, [dropped]),
         workload("fine", 0.9, [kept]), workload("noise", 1.01, [kept])],
    )  # fmt: skip
    lines = tables.regret_lines(report)
    assert lines[0] == "slower / kernelpro: 0.95x Inductor (slower)"
    assert "in context 2.1 ms with them, 2.0 without (kept, faster in 1/8)" in lines[1]
    assert "alone (kernel vs fallback ms): 0.5 vs 0.8 (k) kept" in lines[1]
    assert lines[2] == "dropped / kernelpro: 1.00x Inductor"
    assert "(dropped," in lines[3] and "0.5 vs 0.8 (k) dropped" in lines[3]
    assert len(lines) == 4  # "fine" and "noise" (within REGRET) are not listed
    assert "in context (slower than Inductor, or kernels dropped):" in tables.format_console(report)


def test_regret_names_each_kernel_a_per_kernel_verdict_dropped_with_its_figures():
    """A graph that kept one kernel and dropped a near tie: listed although no slower than
    Inductor, each kernel with its isolated figures and its in-context fate."""
    partial = {
        "graph": "forward",
        "kernels": 2,
        "in_context": "partial",
        "verdict": {"with_ms": 2.3, "without_ms": 2.0, "wins": 0, "rounds": 8,
                    "effects": {"def/conv": 0.278}},
        "dropped": ["def/conv"],
        "isolated": {"abc/norm": [0.5, 0.8], "def/conv": [2.197, 2.2]},
        "tentative": ["def/conv"],
    }  # fmt: skip
    modes = [
        ModeResult("inductor", "ok", median_ms=1.0),
        ModeResult("kernelpro", "ok", median_ms=0.99, graphs=[partial]),
    ]
    report = BenchReport(
        "cuda", "H100", {}, "full", ["inductor", "kernelpro"], {},
        [WorkloadResult("conv", "inference", "float32", "full", "kb", modes)],
    )  # fmt: skip
    lines = tables.regret_lines(report)
    assert lines[0] == "conv / kernelpro: 1.01x Inductor"
    assert "0.5 vs 0.8 (norm) kept" in lines[1]
    assert "2.197 vs 2.2 (conv near tie) dropped, +27.8% graph time with it" in lines[1]
    assert "in context (slower than Inductor, or kernels dropped):" in tables.format_console(report)


def test_per_problem_is_the_committed_form():
    rows = per_problem(_report())
    assert rows == {
        "softmax": {
            "eager_ms": 2.0,
            "inductor_ms": 1.0,
            "kernelpro_ms": 0.5,
            "ok": False,  # kernelpro's output was wrong
            "kernels": "",
        }
    }


def test_joules_per_step_are_a_column_only_where_measured_and_the_power_cap_a_header():
    r = _report()
    assert tables.ENERGY_COLUMN not in tables.format_console(r)
    assert "power" not in tables.format_console(r) and "power" not in tables.format_markdown(r)
    r.workloads[0].modes[1].step_j = 0.0421
    r.power = {"enforced_w": 450.0, "default_w": 700.0, "capped": True,
               "note": "power-capped: 450 W enforced of 700 W"}  # fmt: skip
    head = tables.header(r)
    assert head[head.index("steady ms") + 1] == "J/step"
    console = tables.format_console(r)
    assert console.splitlines()[1] == "power-capped: 450 W enforced of 700 W"
    md = tables.format_markdown(r)
    assert "| inductor | ok | 1 | 2.00x | 1.00x | - | 0.0421 | 25.0% |" in md
    assert "| eager | ok | 2 | 1.00x | 0.50x | - | - | 12.5% |" in md
    assert "power-capped: 450 W enforced of 700 W." in md
    back = BenchReport.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back.power == r.power and back.workloads[0].modes[1].step_j == 0.0421


def test_step_energy_runs_steps_back_to_back_under_the_meter(monkeypatch):
    import torch

    from kernelpro_backend.bench import timing

    clock = [0.0]

    class Meter:  # 200 W; the counter steps every 50 ms
        def energy_mj(self):
            return int(clock[0] / 0.05 + 1e-9) * 10_000

        def power_w(self):
            return 50.0

        def limits_w(self):
            return (700.0, 700.0)

    steps = []

    def step():
        steps.append(1)
        clock[0] += 0.002  # 2 ms a step

    monkeypatch.setattr(timing, "synchronize", lambda device: None)
    monkeypatch.setattr("kernelpro_backend.profilers.energy.time.perf_counter", lambda: clock[0])
    assert timing.step_energy(step, torch.device("cpu"), 2.0, Meter()) is None
    reading = timing.step_energy(step, torch.device("cuda"), 2.0, Meter())
    assert reading is not None and reading.joules_per_call == pytest.approx(0.4, rel=0.03)
    assert reading.idle_watts == 50.0 and len(steps) > 100


def _same_code_report(kernels="0/21", rewrites="none", fallback="inductor", eager_rounds=None):
    """A CPU run where kernelpro replaced nothing: its time is Inductor's code's, plus noise."""
    modes = [
        ModeResult("eager", "ok", median_ms=2.0, round_ms=eager_rounds or [2.0, 2.0]),
        ModeResult("inductor", "ok", median_ms=1.0, round_ms=[1.0, 1.0]),
        ModeResult("kernelpro", "ok", median_ms=0.95, round_ms=[0.9, 1.0], kernels=kernels,
                   rewrites=rewrites, fallback=fallback),
    ]  # fmt: skip
    w = WorkloadResult("mlp", "training", "float32", "tiny", "builtin", modes)
    return BenchReport("cpu", "CPU", {}, "tiny", [m.mode for m in modes], {}, [w])


def test_kernelpro_with_no_kernels_and_no_rewrites_claims_no_speedup(tmp_path):
    """0 kernels, no torch-level rewrite: kernelpro ran Inductor's own code, so its 0.95 ms
    against 1.0 is noise: no speedup cell, no geomean of its own, a line saying why; the
    geomean in the JSON counts it 1.00x."""
    r = _same_code_report()
    w = r.workloads[0]
    assert w.same_code_as("kernelpro") == "inductor" and w.speedup("kernelpro", "inductor")
    row = next(row for row in tables.rows(r) if row[3] == "kernelpro")
    assert row[6:8] == ("-", "same code")
    text = tables.format_console(r)
    assert "kernelpro: geomean" not in text and "1.05x" not in text
    assert "kernelpro: no kernels installed and no torch-level rewrites" in text
    assert "kernelpro on mlp: no kernels installed, no torch-level rewrites: the same code " \
        "as inductor" in text  # fmt: skip
    assert "same code" in tables.format_markdown(r)
    tables.write_json(r, tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["geomean_speedup_vs_inductor"]["kernelpro"] == 1.0
    assert data["workloads"][0]["modes"][2]["same_code_as"] == "inductor"
    assert plots.bar_height(w, "kernelpro", "inductor") == 1.0  # the chart's bar: no 1.05x


def test_a_kernel_in_use_a_rewrite_or_an_unrecorded_fallback_keeps_the_speedup():
    """Kernels in use, or a torch-level rewrite with no kernel (a GPT's attention -> SDPA: its
    1.28x on an H100 came with 0 kernels), change the code: the speedup stands. So does a
    result that does not record the fallback (from before), which cannot be told apart."""
    for kernels, rewrites, fallback in [
        ("2/21", "none", "inductor"),
        ("0/404", "attention 24, linear_cross_entropy 1", "inductor"),
        ("0/21", "none", ""),
    ]:
        r = _same_code_report(kernels, rewrites, fallback)
        assert r.workloads[0].same_code_as("kernelpro") is None
        assert "kernelpro: geomean 2.11x vs eager, 1.05x vs inductor" in tables.format_console(r)


def test_in_a_mixed_run_a_same_code_workload_counts_one_in_the_geomean():
    kept = _same_code_report(kernels="1/3").workloads[0]
    kept.workload, kept.modes[2].median_ms = "softmax", 0.5  # 2x Inductor with its kernel
    r = _same_code_report()
    r.workloads.insert(0, kept)
    assert r.geomean_speedup("kernelpro", "inductor") == pytest.approx(2.0**0.5)
    text = tables.format_console(r)
    assert "1.41x vs inductor (1 of 2 ran inductor's own code: 1.00x)" in text


def test_with_the_eager_fallback_kernelpro_ran_eagers_code():
    r = _same_code_report(fallback="eager")
    row = next(row for row in tables.rows(r) if row[3] == "kernelpro")
    assert row[6:8] == ("same code", "-")
    assert r.geomean_speedup("kernelpro", "eager") == 1.0


def test_a_tiny_round_speedup_is_not_printed_as_zero_and_wild_rounds_are_called_noise():
    """A busy CPU: one eager round 700x slower than Inductor's. Its bracket once read
    "[0.00-3.70]"; it shows the figure itself, and the row is listed as noise."""
    r = _same_code_report(eager_rounds=[700.0, 0.27])
    text = tables.format_console(r)
    assert "[0.0014-3.70]" in text and "[0.00-" not in text
    assert "mlp / eager: rounds from 0.0014x to 3.70x vs inductor" in text
    assert tables.ratio(0.5) == "0.50x" and tables.ratio(0.0) == "0x"
