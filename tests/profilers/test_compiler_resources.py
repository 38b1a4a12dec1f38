import json
import types

import pytest
from profilers_fixtures import CASES, KNOBS, high, read_fixture

from kernelpro_backend.profilers import Severity
from kernelpro_backend.profilers.compiler_resources import (
    occupancy_limit_from_registers,
    parse_ptxas_report,
    resource_findings,
    resources_of_triton,
)


@pytest.mark.parametrize("case", CASES)
def test_ptxas_fixture_names_the_kernel_and_its_registers(case):
    (res,) = parse_ptxas_report(read_fixture(f"ptxas_{case}.txt"))
    assert res.name.startswith(case) and res.arch == "sm_90a"
    assert 0 < res.registers <= 255


@pytest.mark.parametrize("case", ["good_add", "strided_copy", "tiny_grid"])
def test_kernels_without_spills_get_no_high_finding(case):
    (res,) = parse_ptxas_report(read_fixture(f"ptxas_{case}.txt"))
    assert res.spill_bytes == 0
    assert not high(resource_findings(res, KNOBS[case]))


def test_spilling_kernel_reports_spill_bytes_and_asks_for_more_warps():
    (res,) = parse_ptxas_report(read_fixture("ptxas_spill.txt"))
    assert res.spill_bytes > 0 and res.registers == 255
    findings = resource_findings(res, KNOBS["spill"])
    spill = [f for f in findings if f.metric == "spill_bytes"]
    assert spill and spill[0].severity is Severity.HIGH and spill[0].value == res.spill_bytes
    assert dict(spill[0].suggestion) == {"num_warps": 4}


def test_classic_nvcc_report_with_shared_memory():
    text = (
        "ptxas info    : 0 bytes gmem\n"
        "ptxas info    : Compiling entry function '_Z4gemmPKfS0_Pf' for 'sm_90a'\n"
        "ptxas info    : Function properties for _Z4gemmPKfS0_Pf\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 168 registers, 196608 bytes smem, 384 bytes cmem[0]\n"
    )
    (res,) = parse_ptxas_report(text)
    assert (res.registers, res.shared_bytes, res.spill_bytes) == (168, 196608, 0)
    findings = resource_findings(res, {"num_warps": 8, "num_stages": 4, "BLOCK_K": 64})
    by_metric = {f.metric: f for f in findings}
    assert dict(by_metric["shared_memory_bytes"].suggestion) == {"num_stages": 3}
    # 168 regs x 8 warps: 43008 regs per block -> 1 block, 8 of 64 warp slots
    assert by_metric["register_limited_occupancy_pct"].value == 12.5


def test_register_occupancy_arithmetic():
    assert occupancy_limit_from_registers(32, 4) == 1.0
    assert occupancy_limit_from_registers(255, 1) == 8 / 64


@pytest.mark.parametrize("case", CASES)
def test_triton_metadata_fixture(case):
    meta = json.loads(read_fixture(f"triton_meta_{case}.json"))
    kernel = types.SimpleNamespace(
        name=meta["name"],
        n_regs=meta["n_regs"],
        n_spills=meta["n_spills"],
        metadata=types.SimpleNamespace(shared=meta["shared"], num_warps=meta["num_warps"]),
    )
    res = resources_of_triton(kernel)
    assert res.registers == meta["n_regs"] and res.num_warps == meta["num_warps"]
    findings = resource_findings(res, meta["knobs"])
    assert bool(high(findings)) == (case == "spill")
