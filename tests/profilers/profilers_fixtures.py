"""Fixture files and the knobs each fixture kernel was built with (shared by the tests)."""

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
CASES = ("good_add", "strided_copy", "spill", "tiny_grid")
# The knobs each kernel of tests/profilers/flawed_kernels.py was built with.
KNOBS = {
    "good_add": {"BLOCK": 1024, "num_warps": 4},
    "strided_copy": {"BLOCK": 1024, "num_warps": 4},
    "spill": {"BLOCK": 8192, "num_warps": 1},
    "tiny_grid": {"BLOCK": 1024, "num_warps": 4, "rows_per_program": 256},
}


def read_fixture(name: str) -> str:
    path = FIXTURES / name
    if not path.exists():
        pytest.fail(f"fixture {path} is missing: see tests/profilers/fixtures/README.md")
    return path.read_text()


def high(findings):
    return [f for f in findings if f.severity.value == "high"]
