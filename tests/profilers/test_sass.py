import pytest
from profilers_fixtures import CASES, KNOBS, high, read_fixture

from kernelpro_backend.profilers import Severity
from kernelpro_backend.profilers.sass import parse_sass, sass_findings


def _function(case):
    functions = parse_sass(read_fixture(f"sass_{case}.txt"))
    assert len(functions) == 1 and functions[0].name.startswith(case)
    return functions[0]


@pytest.mark.parametrize("case", CASES)
def test_fixture_parses_into_real_instructions(case):
    fn = _function(case)
    assert fn.count("EXIT") >= 1 and fn.count("LDG") >= 1 and fn.count("STG") >= 1


def test_good_kernel_uses_16_byte_accesses_and_gets_no_high_finding():
    fn = _function("good_add")
    assert set(fn.access_widths("LDG")) == {16} and set(fn.access_widths("STG")) == {16}
    findings = sass_findings(fn, KNOBS["good_add"])
    assert not high(findings)
    assert [f.metric for f in findings] == ["instruction_mix"]


def test_strided_kernel_loads_4_bytes_at_a_time():
    findings = sass_findings(_function("strided_copy"), KNOBS["strided_copy"])
    width = [f for f in findings if f.metric == "global_ldg_width_bytes"]
    assert width and width[0].value == 4 and width[0].severity is Severity.MEDIUM
    assert dict(width[0].suggestion) == {"vector_width": 4}


def test_spilling_kernel_shows_local_memory_and_asks_for_more_warps():
    fn = _function("spill")
    assert fn.count("STL") > 0 and fn.count("LDL") > 0
    findings = sass_findings(fn, KNOBS["spill"])
    spill = [f for f in findings if f.metric == "local_memory_instructions"]
    assert spill and spill[0].severity is Severity.HIGH
    assert spill[0].value == fn.count("STL") + fn.count("LDL")
    assert dict(spill[0].suggestion) == {"num_warps": 4}


TRITON_FORM = """Function:matmul_kernel
--:-:-:-:1\tLDC R1, c[0x0][0x28];
--:-:2:-:1\t@!P0 LDG.E.128 R4, desc[UR4][R2.64];
--:-:-:-:2\tHMMA.16816.F32.BF16 R8, R4, R6, R8;
--:-:-:-:2\tFFMA R1, R2, R3, R1;
--:-:-:-:1\tSTG.E.64 desc[UR4][R2.64], R8;
--:-:-:-:1\tEXIT;
"""


def test_triton_asm_sass_form_and_matrix_instruction_rules():
    (fn,) = parse_sass(TRITON_FORM)
    assert fn.count("HMMA") == 1 and fn.access_widths("STG") == {8: 1}
    findings = sass_findings(fn, {"BLOCK_K": 32, "BLOCK_M": 32, "num_warps": 4}, element_bytes=2)
    matrix = [f for f in findings if f.metric == "matrix_instructions"]
    assert (
        matrix
        and matrix[0].severity is Severity.MEDIUM
        and dict(matrix[0].suggestion) == {"BLOCK_M": 64}
    )
    ffma_only = parse_sass(TRITON_FORM.replace("HMMA.16816.F32.BF16", "FFMA"))[0]
    matrix = [
        f for f in sass_findings(ffma_only, {"BLOCK_K": 32}) if f.metric == "matrix_instructions"
    ]
    assert matrix and matrix[0].severity is Severity.HIGH and "FFMA only" in str(matrix[0].value)
