"""Codegen tests run Triton kernels in its CPU interpreter; GPU-marked ones on the real compiler.

Generated modules are built inside the tests, after this fixture has set TRITON_INTERPRET, so
each test gets the mode it needs (Triton decides per JIT function, when it is created). The
variable is set per test and restored afterwards: setting it at import time would put every
later test of the session - GPU tests in other directories included - in the interpreter."""

import os
import sys

import pytest
from helpers import triton_mode

sys.path.insert(0, os.path.dirname(__file__))

_triton_mode = pytest.fixture(autouse=True, name="_triton_mode")(triton_mode)
