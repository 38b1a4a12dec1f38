import argparse
from pathlib import Path

import pytest

from kernelpro_backend.cli import bench, report

PROBLEMS_DIR = Path(__file__).parent / "problems"


def run_cli(*argv: str) -> int:
    """Parse `argv` with a parser that has only the bench and report subcommands, and run it."""
    parser = argparse.ArgumentParser(prog="kernelpro")
    sub = parser.add_subparsers(dest="command")
    bench.add_cli(sub)
    report.add_cli(sub)
    args = parser.parse_args(list(argv))
    return int(args.func(args))


@pytest.fixture
def problems_dir() -> Path:
    return PROBLEMS_DIR
