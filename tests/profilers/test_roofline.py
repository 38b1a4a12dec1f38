import types

import pytest

from kernelpro_backend.profilers import Bottleneck, Severity
from kernelpro_backend.profilers.roofline import Roofs, classify

H100 = Roofs(bytes_per_s=3.0e12, flops_per_s=60e12, launch_latency_ms=0.005, sm_count=132)


def test_on_the_memory_roof_is_memory_bound_with_info_only():
    # 201 MB at 3 TB/s is 67 us; measured 70 us -> 96% of SOL
    report = classify(0.070, flops=16.7e6, bytes=201.3e6, ceilings=H100)
    assert report.bottleneck is Bottleneck.MEMORY
    assert report.sol_ms == pytest.approx(201.3e6 / 3.0e12 * 1e3)
    assert report.sol_fraction == pytest.approx(report.sol_ms / 0.070)
    assert report.findings[0].tool == "roofline" and report.findings[0].metric == "bottleneck"
    assert report.findings[0].severity is Severity.INFO
    assert report.findings[1].metric == "sol_fraction"


def test_high_intensity_near_roof_is_compute_bound():
    # 2*4096^3 FLOP = 137 GFLOP -> 2.29 ms at 60 TFLOP/s; 100 MB moves in 0.03 ms
    report = classify(2.6, flops=2 * 4096**3, bytes=100e6, ceilings=H100)
    assert report.bottleneck is Bottleneck.COMPUTE
    assert report.compute_ms > report.memory_ms


def test_tiny_grid_is_latency_bound_and_asks_for_more_programs():
    report = classify(
        0.41,
        flops=1e6,
        bytes=12.6e6,
        ceilings=H100,
        grid_size=4,
        knobs={"BLOCK": 1024, "rows_per_program": 256},
    )
    assert report.bottleneck is Bottleneck.LATENCY
    finding = report.findings[0]
    assert finding.severity is Severity.HIGH
    # 4 programs -> at least 2 waves of 132: 64x more programs, 256 -> 4 rows each
    assert dict(finding.suggestion) == {"rows_per_program": 4}
    assert "4 programs for 132 SMs" in finding.guidance


def test_tiny_grid_of_a_matmul_asks_for_split_k():
    report = classify(
        0.2, flops=2 * 64 * 64 * 65536, bytes=1e6, ceilings=H100, grid_size=1, knobs={"BLOCK_K": 64}
    )
    assert report.bottleneck is Bottleneck.LATENCY
    assert dict(report.findings[0].suggestion) == {"SPLIT_K": 16}  # the GEMM template's knob name


def test_time_near_launch_latency_is_latency_bound():
    report = classify(0.006, flops=1e3, bytes=4096, ceilings=H100)
    assert report.bottleneck is Bottleneck.LATENCY
    assert "launch latency" in report.findings[0].guidance


def test_far_from_both_roofs_is_under_utilised():
    report = classify(1.0, flops=1e6, bytes=201.3e6, ceilings=H100, grid_size=16384)
    assert report.bottleneck is Bottleneck.UNDERUTILIZED
    assert report.findings[0].severity is Severity.HIGH


def test_half_way_to_the_memory_roof_is_memory_bound_medium():
    report = classify(0.134, flops=0, bytes=201.3e6, ceilings=H100)
    assert report.bottleneck is Bottleneck.MEMORY
    assert report.findings[0].severity is Severity.MEDIUM


def test_faster_than_speed_of_light_is_flagged_as_a_bug():
    report = classify(0.010, flops=0, bytes=201.3e6, ceilings=H100)
    assert report.findings[0].severity is Severity.HIGH
    assert "bug" in report.findings[0].guidance


def test_ceilings_from_mapping_and_from_any_object():
    assert Roofs.of({"bytes_per_s": 3e12, "flops_per_s": 6e13}).sm_count == 132
    sol = types.SimpleNamespace(bytes_per_s=4.3e12, flops_per_s=7.9e14, sm_count=132)
    assert Roofs.of(sol).bytes_per_s == 4.3e12
    with pytest.raises(ValueError, match="bytes_per_s"):
        Roofs.of({"flops_per_s": 1.0})
    with pytest.raises(ValueError, match="measured_ms"):
        classify(0.0, 1.0, 1.0, H100)


def test_host_bound_reference_of_tiny_work_is_latency_bound():
    # Seen on H100: a 17 KB RMSNorm reference measured 130 us per call (6 eager launches) was
    # called under-utilised at "0.0 us" of speed of light; its work is below one launch.
    report = classify(0.130, flops=2.08e3, bytes=1.68e4, ceilings=H100)
    assert report.bottleneck is Bottleneck.LATENCY
    text = report.findings[0].guidance
    assert "less than one" in text and "launch" in text
    assert "0.0056 us" in text and " 0.0 us" not in report.findings[1].guidance


def test_suggestions_use_the_knob_names_of_codegen_templates():
    from kernelpro_backend.profilers.suggest import fewer_registers, more_programs, wider_loads

    rows = {"ROWS": 8, "BLOCK_C": 1024, "num_warps": 8, "num_stages": 1}
    assert more_programs(rows, grid=16, sm_count=132) == {"ROWS": 1}
    assert fewer_registers({**rows, "num_warps": 8}) == {"BLOCK_C": 512}
    gemm = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 64, "SPLIT_K": 1, "num_warps": 4}
    assert more_programs(gemm, grid=4, sm_count=132) == {"SPLIT_K": 16}
    # a GEMM's tiles shrink to 64, then its K is split (tensor cores want 64-wide tiles)
    wide = dict(gemm, BLOCK_M=128, BLOCK_N=128)
    assert more_programs(wide, grid=16, sm_count=132) == {"BLOCK_M": 64}
    assert more_programs(dict(wide, BLOCK_M=64), grid=32, sm_count=132) == {"BLOCK_N": 64}
    assert more_programs(dict(wide, BLOCK_M=64, BLOCK_N=64), grid=64, sm_count=132) == {
        "SPLIT_K": 4
    }
    # 16-byte loads: each of 32 x num_warps threads needs 4 fp32 / 8 bf16 contiguous elements.
    assert wider_loads({"BLOCK_C": 256, "num_warps": 4}, 4) == {"num_warps": 2}
    assert wider_loads({"BLOCK_C": 64, "num_warps": 1}, 2) == {"BLOCK_C": 256}
    assert wider_loads({"BLOCK_C": 1024, "num_warps": 4}, 4) == {}
    assert wider_loads({"vector_width": 2}, 4) == {"vector_width": 4}
