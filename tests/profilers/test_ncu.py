import os
import stat
import sys

import pytest
from profilers_fixtures import CASES, FIXTURES, KNOBS, high, read_fixture

from kernelpro_backend.profilers import Severity
from kernelpro_backend.profilers.ncu import ncu_argv, ncu_findings, run_ncu
from kernelpro_backend.profilers.ncu_metrics import (
    ALL_METRICS,
    CORE_METRICS,
    parse_ncu_csv,
    parse_value,
    unknown_metrics,
)


def _launch(case):
    launches = parse_ncu_csv(read_fixture(f"ncu_{case}.csv"))
    assert len(launches) == 1, "profile one launch per case (--launch-count 1)"
    return launches[0]


@pytest.mark.parametrize("case", CASES)
def test_fixture_parses_with_the_metrics_the_rules_need(case):
    launch = _launch(case)
    assert case in launch.kernel_name
    for name in (
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "launch__grid_size",
        "launch__waves_per_multiprocessor",
        "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    ):
        assert name in launch.metrics, f"{name} missing from ncu_{case}.csv"
    assert "ID" not in launch.metrics and "Kernel Name" not in launch.texts


def test_good_kernel_gets_no_high_finding():
    findings = ncu_findings(_launch("good_add"), KNOBS["good_add"])
    assert not high(findings), [f.to_dict() for f in high(findings)]


def test_strided_kernel_is_named_uncoalesced_with_a_vector_width_change():
    findings = ncu_findings(_launch("strided_copy"), KNOBS["strided_copy"])
    hit = [f for f in findings if f.metric == "global_ld_sectors_per_request"]
    assert hit and hit[0].severity is Severity.HIGH
    assert hit[0].value > 16 and "ncoalesced" in hit[0].guidance
    assert dict(hit[0].suggestion) == {"vector_width": 4}
    assert findings[0].severity is Severity.HIGH  # most severe first


def test_spilling_kernel_is_register_limited_and_asks_for_more_warps():
    findings = ncu_findings(_launch("spill"), KNOBS["spill"])
    occ = [f for f in findings if f.metric == "theoretical_occupancy_pct"]
    assert occ and occ[0].severity is Severity.HIGH
    assert "registers" in occ[0].guidance
    assert dict(occ[0].suggestion) == {"num_warps": 4}  # 1 warp -> 4: 4x fewer values per thread


def test_tiny_grid_is_named_with_a_rows_per_program_change():
    findings = ncu_findings(_launch("tiny_grid"), KNOBS["tiny_grid"])
    waves = [f for f in findings if f.metric == "waves_per_sm"]
    assert waves and waves[0].severity is Severity.HIGH
    assert "of the SMs have nothing to do" in waves[0].guidance
    assert dict(waves[0].suggestion) == {"rows_per_program": 4}


def test_long_format_details_page_parses_to_the_same_numbers():
    text = (
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
        '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"\n'
        '"0","1","python3","h","k","1","7","(128, 1, 1)","(4, 1, 1)","0","9.0","Command line profiler '
        'metrics","launch__grid_size","","4"\n'
        '"0","1","python3","h","k","1","7","(128, 1, 1)","(4, 1, 1)","0","9.0","Command line profiler '
        'metrics","gpu__time_duration.sum","nsecond","412,320"\n'
        '"0","1","python3","h","k","1","7","(128, 1, 1)","(4, 1, 1)","0","9.0","Command line profiler '
        'metrics","sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active","%","n/a"\n'
    )
    (launch,) = parse_ncu_csv(text)
    assert launch.metrics == {"launch__grid_size": 4.0, "gpu__time_duration.sum": 412320.0}
    assert (
        launch.texts["sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"]
        == "n/a"
    )


def test_values_and_errors():
    assert parse_value("1,048,576") == 1048576.0
    assert parse_value("4.0e-05") == pytest.approx(4e-5)
    assert parse_value("n/a") is None and parse_value("(128, 1, 1)") is None
    assert parse_ncu_csv("==PROF== No kernels were profiled.\n") == []
    err = "==ERROR== Failed to find metric sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active\n"
    assert unknown_metrics(err, ALL_METRICS) == {
        "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"
    }


def test_argv_never_changes_clocks_and_profiles_one_launch_in_the_profiler_range():
    argv = ncu_argv("ncu", ["python3", "x.py"], CORE_METRICS, "add_kernel")
    joined = " ".join(argv)
    assert "--clock-control none" in joined and "--launch-count 1" in joined
    assert "--profile-from-start off" in joined and "--csv --page raw" in joined
    assert argv[-2:] == ["python3", "x.py"] and "regex:add_kernel" in argv


def _fake_ncu(tmp_path, monkeypatch, body):
    script = tmp_path / "ncu"
    script.write_text(f"#!{sys.executable}\nimport sys\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_run_ncu_retries_without_metrics_this_ncu_does_not_know(tmp_path, monkeypatch):
    csv_path = FIXTURES / "ncu_tiny_grid.csv"
    body = (
        "metrics = sys.argv[sys.argv.index('--metrics') + 1]\n"
        "if 'gmma' in metrics:\n"
        "    print('==ERROR== Failed to find metric sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active', file=sys.stderr)\n"
        "    sys.exit(1)\n"
        f"print(open({str(csv_path)!r}).read())\n"
    )
    _fake_ncu(tmp_path, monkeypatch, body)
    text, launches = run_ncu(["python3", "-c", "pass"], "tiny_grid_kernel")
    assert launches[0].kernel_name == "tiny_grid_kernel" and '"ID"' in text


def test_run_ncu_says_what_went_wrong_when_nothing_was_profiled(tmp_path, monkeypatch):
    _fake_ncu(tmp_path, monkeypatch, "print('==PROF== No kernels were profiled.')")
    with pytest.raises(RuntimeError, match="profiled no kernel launch"):
        run_ncu(["python3", "-c", "pass"], "missing_kernel")


def test_sector_use_is_judged_only_when_loads_went_through_the_lsu_pipe():
    """ncu reports 0% bytes used per sector for kernels whose global loads all use TMA (no LSU
    requests): that is no data and must not be called scattered access."""
    from kernelpro_backend.profilers.ncu_metrics import NcuLaunch
    from kernelpro_backend.profilers.ncu_rules import ncu_findings as rules

    metric = "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct"
    requests = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"
    tma_only = NcuLaunch("cublas_tma_gemm", {metric: 0.0, requests: 0.0}, {})
    assert not [
        f for f in rules(tma_only, {}, element_bytes=2) if f.metric.endswith("per_sector_pct")
    ]
    # A cuBLAS GEMM on the H100 issued some LSU loads and still read exactly 0% (2026-11-23).
    some_lsu = NcuLaunch("cublas_gemm", {metric: 0.0, requests: 64.0}, {})
    assert not [
        f for f in rules(some_lsu, {}, element_bytes=2) if f.metric.endswith("per_sector_pct")
    ]
    scattered = NcuLaunch("gather", {metric: 25.0, requests: 1000.0}, {})
    (f,) = [f for f in rules(scattered, {}, element_bytes=2) if f.metric.endswith("per_sector_pct")]
    assert f.value == 25.0


def test_the_ncu_tool_runs_ncu_with_the_targets_timeout(monkeypatch):
    from kernelpro_backend.profilers import ncu as ncu_mod
    from kernelpro_backend.profilers.target import ProfileTarget

    seen = {}

    def fake_run(command, kernel_regex=None, timeout_s=None):
        seen["timeout_s"] = timeout_s
        raise RuntimeError("stop")

    monkeypatch.setattr(ncu_mod, "run_ncu", fake_run)
    target = ProfileTarget(ncu_command=["python3", "-c", "pass"], ncu_run_timeout_s=42.0)
    with pytest.raises(RuntimeError, match="stop"):
        ncu_mod.NcuTool().run(target)
    assert seen["timeout_s"] == 42.0
