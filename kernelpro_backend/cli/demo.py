"""`kernelpro demo`: compile a transformer block with the backend and time it.

Owns: the `demo` arguments. Must not: hold the demo itself (demo.py does).
"""

from __future__ import annotations

import argparse
from typing import Any


def add_cli(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "demo", help="compile a transformer block with the backend and time it"
    )
    p.add_argument("--steps", type=_positive, default=20, help="timed training steps (default 20)")
    p.set_defaults(func=run_demo)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"needs at least 1 step, got {value}")
    return value


def run_demo(args: argparse.Namespace) -> int:
    from ..bench.demo import run_demo as demo

    return demo(steps=args.steps)
