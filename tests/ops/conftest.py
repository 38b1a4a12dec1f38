"""The ops' tests run Triton kernels in its CPU interpreter; GPU-marked ones on the real compiler
(the same per-test switch as tests/codegen/conftest.py: helpers.triton_mode)."""

import pytest
from helpers import triton_mode

_triton_mode = pytest.fixture(autouse=True, name="_triton_mode")(triton_mode)
