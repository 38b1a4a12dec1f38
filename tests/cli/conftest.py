from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent.parent
PROBLEMS_DIR = TESTS / "bench" / "problems"
sys.path.insert(0, str(TESTS / "cache"))  # graphs.py: the subgraphs the cache tests store

from graphs import linear_softmax_subgraph, tanh_subgraph  # noqa: E402

from kernelpro_backend.cli.main import build_parser  # noqa: E402


def run_cli(*argv: str) -> int:
    """Parse `argv` with the `kernelpro` parser and run the command it names."""
    args = build_parser().parse_args(list(argv))
    return int(args.func(args))


# The subgraphs tests/cache/conftest.py gives its tests, under the same names.
tanh_sg = pytest.fixture(scope="session", name="tanh_sg")(tanh_subgraph)
linear_sg = pytest.fixture(scope="session", name="linear_sg")(linear_softmax_subgraph)


@pytest.fixture
def problems_dir() -> Path:
    return PROBLEMS_DIR
