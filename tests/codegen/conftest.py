"""Codegen tests run Triton kernels in its CPU interpreter: the variable must be set before
Triton creates any JIT function (generated modules are built inside the tests)."""

import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, os.path.dirname(__file__))
