"""The `kernelpro` command line: the argparse root, the global options and subcommand dispatch.

Owns: `build_parser` (`--version`, the global options, one subcommand per module of this
package, each adding itself through its `add_cli(subparsers)`), `main(argv) -> exit status`,
and the command line's boundary: an error ends in one line on stderr saying what to do, exit
1 (usage errors 2, as argparse does), with its traceback only under -v.
Must not: hold logic the library lacks; nothing outside cli/ imports this package.

Global options, accepted before or after the subcommand (`kernelpro -v cache ls` and
`kernelpro cache ls -v` are the same):
    --cache-dir DIR   the kernel cache every command reads and writes (KERNELPRO_CACHE_DIR)
    -v, --verbose     log what the backend does, with the wall clock; tracebacks of errors

    kernelpro --version
    kernelpro explain kernelpro_backend.examples:transformer_block --json
    kernelpro demo
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from .. import __version__
from ..logs import FORMAT, LOGGER
from ..paths import CACHE_DIR_ENV
from . import bench, cache, demo, explain, profile, report, warmup
from .errors import one_line


def global_options(suppress: bool) -> argparse.ArgumentParser:
    """The options every command takes, as an argparse parent. Below the root their default
    is SUPPRESS, so a subcommand that is not given one keeps what the root parsed."""
    default = argparse.SUPPRESS if suppress else None
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(
        "--cache-dir",
        default=default,
        metavar="DIR",
        help="kernel cache directory (default: $KERNELPRO_CACHE_DIR or ~/.cache/kernelpro)",
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="log what the backend does; show the traceback of an error",
    )
    return p


class _Subparsers(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Subparsers that all take the global options (and pass them on to their own)."""

    def add_parser(self, name: str, **kwargs):  # type: ignore[no-untyped-def,override]
        kwargs["parents"] = [*kwargs.get("parents", []), global_options(suppress=True)]
        parser = super().add_parser(name, **kwargs)
        parser.register("action", "parsers", _Subparsers)
        return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelpro",
        description="kernelpro: a torch.compile backend that searches, proves and caches faster "
        "GPU kernels. Use it with torch.compile(model, backend='kernelpro').",
        parents=[global_options(suppress=False)],
    )
    parser.register("action", "parsers", _Subparsers)
    parser.add_argument("--version", action="version", version=f"kernelpro {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in (explain, warmup, cache, profile, bench, report, demo):
        command.add_cli(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.error("a command is required (`kernelpro --help` lists them)")  # exit 2
    if args.cache_dir:  # every command, and the library under it, uses this cache
        os.environ[CACHE_DIR_ENV] = args.cache_dir
    _configure_logging(args.verbose)
    return one_line(args, lambda: int(args.func(args)))


def _configure_logging(verbose: bool) -> None:
    """The program's logging: the records' names in front (their messages have no prefix);
    -v: kernelpro's INFO lines too, with the wall clock, so a long run's phases can be read
    off its log (other libraries stay at WARNING)."""
    stamp = "%(asctime)s.%(msecs)03d " if verbose else ""
    logging.basicConfig(level=logging.WARNING, format=stamp + FORMAT, datefmt="%H:%M:%S")
    if verbose:
        logging.getLogger(LOGGER).setLevel(logging.INFO)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
