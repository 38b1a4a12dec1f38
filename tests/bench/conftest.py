import argparse
from pathlib import Path

import pytest

from kernelpro_backend.bench import add_cli

PROBLEMS_DIR = Path(__file__).parent / "problems"


def run_cli(*argv: str) -> int:
    """Parse `argv` with a parser that has only the bench subcommands, and run it."""
    parser = argparse.ArgumentParser(prog="kernelpro")
    add_cli(parser.add_subparsers(dest="command"))
    args = parser.parse_args(list(argv))
    return int(args.func(args))


@pytest.fixture
def problems_dir() -> Path:
    return PROBLEMS_DIR
