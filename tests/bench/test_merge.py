"""Merging the results of several bench runs into one table: reports read back from JSON, the
JSON lines of finished workloads a cut GPU run leaves, one run per workload, SOL kept from an
earlier run, the roofs for the roofline chart."""

import dataclasses
import json

import pytest

from kernelpro_backend.bench import tables
from kernelpro_backend.bench.merge import MergeError, merge_reports, workloads_from_jsonl
from kernelpro_backend.bench.plots import labelled, roof_lines
from kernelpro_backend.bench.results import (
    BenchReport,
    ModeResult,
    SubgraphPoint,
    WorkloadResult,
)
from kernelpro_backend.bench.sol import roofs_of

from .conftest import run_cli

ROOFS = {"dram_tb_per_s": 3.0, "fp32_tflops": 60.0, "tf32_tflops": 400.0, "bf16_tflops": 800.0}


def _workload(name, ms, sol_ms=None, modes=("eager", "inductor", "kernelpro")):
    results = [
        ModeResult(m, "ok", median_ms=t, compile_s=1.0) for m, t in zip(modes, ms, strict=True)
    ]
    points = [SubgraphPoint("0:f:gemm", 2e9, 1e6, 0.01)] if sol_ms else []
    return WorkloadResult(name, "training", "bfloat16", "full", "builtin", results, sol_ms, points)


def _write(tmp_path, name, workloads, modes=("eager", "inductor", "kernelpro"), roofs=None):
    report = BenchReport("cuda", "H100", {"torch": "2.11"}, "full", list(modes),
                         {m: m for m in modes}, workloads, roofs or {})  # fmt: skip
    path = tmp_path / name
    tables.write_json(report, path)
    return path


def _jsonl(tmp_path, workloads):
    """The file a cut run leaves: one finished workload a line."""
    path = tmp_path / "workloads.jsonl"
    for w in workloads:
        tables.append_jsonl(w, path)
    return path


def _unlabelled(name, ms, modes):
    """A workload whose results lack kind and dtype (as older runs wrote them)."""
    return dataclasses.replace(_workload(name, ms, modes=modes), kind="?", dtype="?")


def test_report_round_trips_through_json_with_infinite_errors(tmp_path):
    w = _workload("mlp", (2.0, 1.0, 0.5), sol_ms=0.25)
    w.modes[2] = ModeResult("kernelpro", "wrong", 0.5, 1.0, max_abs_err=float("inf"), message="x")
    path = _write(tmp_path, "a.json", [w], roofs=ROOFS)
    back = BenchReport.from_dict(json.loads(path.read_text()))
    assert back.workloads[0] == w  # speedups and % SOL in the JSON are derived, not read back
    assert back.roofs == ROOFS and back.modes == ["eager", "inductor", "kernelpro"]


def test_jsonl_reads_back_every_finished_workload_whole(tmp_path):
    conv = _workload("convnet", (3.9, 3.4), modes=("eager", "inductor"))
    conv.modes[1] = ModeResult("inductor", "wrong", 3.4, 1.0, max_abs_err=float("inf"), message="x")
    lm_head = _workload("lm_head", (3.4, 2.8), sol_ms=1.0, modes=("eager", "inductor"))
    path = _jsonl(tmp_path, [conv, lm_head])
    assert workloads_from_jsonl(path.read_text() + "\n") == [conv, lm_head]
    with pytest.raises(MergeError, match="line 2: not a workload result"):
        workloads_from_jsonl(path.read_text().splitlines()[0] + '\n{"workload": "cut"}')


def test_a_workload_is_taken_whole_from_the_last_run_and_keeps_earlier_sol(tmp_path):
    first = _write(tmp_path, "a.json", [_workload("moe", (5.0, 2.5, 2.4), sol_ms=1.2),
                                         _workload("mlp", (25.0, 24.7, 24.7), sol_ms=21.0)],
                   roofs=ROOFS)  # fmt: skip
    four = ("eager", "inductor", "kernelpro", "inductor-max-autotune")
    second = _write(tmp_path, "b.json", [_workload("mlp", (25.2, 24.8, 24.8, 24.6), modes=four)],
                    modes=four)  # fmt: skip
    cut = _jsonl(tmp_path, [_unlabelled("lm_head", (3.4, 2.8), ("eager", "kernelpro"))])
    report = merge_reports(
        [first, second, cut], {"lm_head": {"kind": "training", "dtype": "bfloat16"}}
    )
    assert [w.workload for w in report.workloads] == ["moe", "mlp", "lm_head"]
    mlp = report.workloads[1]
    assert [m.median_ms for m in mlp.modes] == [25.2, 24.8, 24.8, 24.6]  # no mixing of runs
    assert mlp.sol_ms == 21.0 and mlp.subgraphs  # SOL is the workload's, not the run's
    assert mlp.sol_fraction("inductor-max-autotune") == pytest.approx(21.0 / 24.6)
    assert report.modes == ["eager", "inductor", "inductor-max-autotune", "kernelpro"]
    assert report.workloads[2].dtype == "bfloat16" and report.roofs == ROOFS


def test_merge_refuses_what_cannot_share_a_table(tmp_path):
    a = _write(tmp_path, "a.json", [_workload("moe", (5.0, 2.5, 2.4))])
    b = BenchReport(
        "cuda", "A100", {}, "full", ["eager"], {}, [_workload("mlp", (1.0,), None, ("eager",))]
    )
    tables.write_json(b, tmp_path / "b.json")
    with pytest.raises(MergeError, match="different devices"):
        merge_reports([a, tmp_path / "b.json"])
    with pytest.raises(MergeError, match="bench.json"):
        merge_reports([_jsonl(tmp_path, [_workload("mlp", (1.0,), modes=("eager",))])])
    with pytest.raises(MergeError, match="no input has"):
        merge_reports([a], {"gpt_block": {"kind": "training", "dtype": "bfloat16"}})
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(MergeError, match="not a bench report"):
        merge_reports([tmp_path / "bad.json"])


def test_merge_from_the_cli_writes_the_table_and_refuses_bad_input(tmp_path, capsys):
    a = _write(tmp_path, "a.json", [_workload("moe", (5.0, 2.5, 2.4), sol_ms=1.2)])
    ceilings = tmp_path / "ceilings.json"  # as an evaluate run stores them
    ceilings.write_text(json.dumps({"ceilings": {"dram_bytes_per_s": 3e12, "fp32_flops_per_s": 6e13,
                                                 "tf32_flops_per_s": 4e14,
                                                 "bf16_flops_per_s": 8e14}}))  # fmt: skip
    md = tmp_path / "all.md"
    cut = _jsonl(tmp_path, [_workload("mlp", (25.0, 24.7, 12.5))])
    rc = run_cli("bench", "--merge", str(a), "--merge", str(cut), "--roofs", str(ceilings),
                 "--markdown", str(md), "--json", str(tmp_path / "all.json"))  # fmt: skip
    assert rc == 0
    assert (
        "| moe | training | bfloat16 | kernelpro | ok | 2.4 | 2.08x | 1.04x | - | 50.0% |"
        in md.read_text()
    )
    assert "| mlp | training | bfloat16 | kernelpro | ok | 12.5 | 2.00x | 1.98x |" in md.read_text()
    assert json.loads((tmp_path / "all.json").read_text())["roofs"] == pytest.approx(ROOFS)
    assert run_cli("bench", "--merge", str(tmp_path / "missing.json")) == 2
    assert "cannot read" in capsys.readouterr().err


def test_roofs_and_labels_of_the_roofline_chart():
    assert roofs_of({"dram_bytes_per_s": 3e12, "fp32_flops_per_s": 6e13, "tf32_flops_per_s": 4e14,
                     "bf16_flops_per_s": 8e14}) == pytest.approx(ROOFS)  # fmt: skip
    lines = roof_lines(ROOFS, 0.1, 1000.0)
    assert [label.split()[0] for label, _, _ in lines] == ["BF16", "TF32", "FP32"]
    _, xs, ys = lines[0]
    assert ys[0] == pytest.approx(0.1 * 3.0)  # memory-bound: intensity x bandwidth
    assert ys[-1] == 800.0  # compute-bound: the peak
    assert roof_lines({"bf16_tflops": 800.0}, 0.1, 10.0) == []  # no bandwidth, no roofs
    points = [("a", SubgraphPoint(str(i), 1.0, 1.0, ms)) for i, ms in enumerate((1, 5, 3, 2))]
    points.append(("b", SubgraphPoint("x", 1.0, 1.0, 0.1)))
    assert labelled(points, per_workload=2) == {1, 2, 4}


def test_a_mode_run_differently_by_different_runs_is_described_per_workload(tmp_path):
    a = _write(tmp_path, "a.json", [_workload("softmax", (1.0, 0.8, 0.5))])
    b = _write(tmp_path, "b.json", [_workload("mlp", (25.0, 24.7, 24.7))])
    report_b = json.loads(b.read_text())
    report_b["mode_descriptions"]["kernelpro"] = "kernelpro cache-only"
    b.write_text(json.dumps(report_b))
    cut = _jsonl(tmp_path, [_workload("moe", (5.0, 2.4), modes=("eager", "kernelpro"))])
    d = merge_reports([a, b, cut]).mode_descriptions
    assert d["eager"] == "eager for softmax, mlp; not recorded in workloads.jsonl for moe"
    assert d["kernelpro"] == (
        "kernelpro for softmax; kernelpro cache-only for mlp; not recorded in workloads.jsonl for moe"
    )
    assert d["inductor"] == "inductor"


def test_speedup_bars_tell_a_failed_mode_from_one_that_did_not_run():
    import math

    from kernelpro_backend.bench.plots import bar_height

    w = _workload("moe", (5.0, 2.5, 2.4))
    w.modes.append(ModeResult("inductor-max-autotune", "failed", message="boom"))
    assert bar_height(w, "kernelpro", "inductor") == pytest.approx(2.5 / 2.4)
    assert bar_height(w, "inductor-max-autotune", "inductor") == 0.0
    assert math.isnan(
        bar_height(_workload("gpt", (3.0, 2.0, 2.0)), "inductor-max-autotune", "eager")
    )
