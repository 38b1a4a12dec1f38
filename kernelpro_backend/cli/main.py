"""The `kernelpro` command line: the argparse root and subcommand dispatch.

Owns: `build_parser` (`--version`, `-v`, one subcommand per module of this package, each adding
itself through its `add_cli(subparsers)`) and `main(argv) -> exit status`.
Must not: hold logic the library lacks; nothing outside cli/ imports this package.

    kernelpro --version
    kernelpro explain kernelpro_backend.examples:transformer_block
    kernelpro demo
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from .. import __version__
from . import bench, cache, demo, explain, profile, report, warmup


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelpro",
        description="kernelpro: a torch.compile backend that searches, proves and caches faster "
        "GPU kernels. Use it with torch.compile(model, backend='kernelpro').",
    )
    parser.add_argument("--version", action="version", version=f"kernelpro {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the backend does")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in (explain, warmup, cache, profile, bench, report, demo):
        command.add_cli(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # -v: progress with the wall clock, so a long run's phases can be read off its log
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s.%(msecs)03d %(message)s" if args.verbose else "%(message)s",
        datefmt="%H:%M:%S",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
