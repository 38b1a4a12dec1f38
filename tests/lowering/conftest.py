"""Lowering tests lower subgraphs of real models and check the kernels they become, so they share
the codegen tests' harness (tests/codegen/harness.py) and run Triton kernels in its CPU
interpreter like those tests: TRITON_INTERPRET is set per test and restored afterwards (see
tests/codegen/conftest.py for why not at import time)."""

import os
import sys

import pytest
from helpers import triton_mode

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "codegen"))

_triton_mode = pytest.fixture(autouse=True, name="_triton_mode")(triton_mode)
