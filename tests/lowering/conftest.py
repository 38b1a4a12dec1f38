"""Lowering tests lower subgraphs of real models and check the kernels they become, so they share
the codegen tests' harness (tests/codegen/harness.py) and run Triton kernels in its CPU
interpreter like those tests: TRITON_INTERPRET is set per test and restored afterwards (see
tests/codegen/conftest.py for why not at import time)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "codegen"))


@pytest.fixture(autouse=True)
def _triton_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if "gpu" in request.keywords:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    else:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
