"""The cache tests' fixtures and graphs (tests/cache), for the policy that reads the cache."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "cache"))

from graphs import tanh_subgraph  # noqa: E402

from kernelpro_backend.cache import KernelCache  # noqa: E402


@pytest.fixture(scope="session")
def tanh_sg():
    return tanh_subgraph()


@pytest.fixture
def cache(tmp_path):
    with KernelCache(tmp_path / "kp") as c:
        yield c
