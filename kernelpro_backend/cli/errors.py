"""The command line's errors: one line on stderr that says what is wrong and what to do.

Owns: `one_line(args, run)`, the boundary every command runs inside (cli/main.py), and
`trouble(e, cache_dir)`, the words for a kernel cache that cannot be opened, read or written
(`kernelpro cache` uses them at its own boundary too). Exit status 1; argparse's usage errors
stay 2; under -v the traceback instead of the line.
Must not: catch what the command line itself raises to end (SystemExit: argparse's usage errors,
a bad MODULE:FN), or print anything but the one line.
"""

from __future__ import annotations

import argparse
import errno
import sqlite3
import sys
from collections.abc import Callable

from ..cache.store import CacheReadOnly, CacheUnavailable
from ..options import OptionsError
from ..paths import resolve_cache_dir

ELSEWHERE = "or pass --cache-dir (or set KERNELPRO_CACHE_DIR to) another directory"


def command_name(args: argparse.Namespace) -> str:
    """ "kernelpro warmup", "kernelpro cache ls": what the error line starts with."""
    words = ["kernelpro", getattr(args, "command", None), getattr(args, "cache_command", None)]
    return " ".join(w for w in words if w)


def one_line(args: argparse.Namespace, run: Callable[[], int]) -> int:
    """`run()`'s exit status; an exception it raises becomes one line on stderr and status 1
    (with -v: the traceback); Ctrl-C, status 130."""
    try:
        return run()
    except KeyboardInterrupt:
        print(f"{command_name(args)}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if getattr(args, "verbose", False):
            raise
        print(f"{command_name(args)}: {_what_to_do(e, args)}".replace("\n", " "), file=sys.stderr)
        return 1


def _what_to_do(e: Exception, args: argparse.Namespace) -> str:
    if isinstance(e, OptionsError):
        return str(e)  # it names the option or variable and what it takes
    if isinstance(e, (OSError, sqlite3.Error, CacheUnavailable)):
        return trouble(e, getattr(args, "cache_dir", None))
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return (
        f"{type(e).__name__}: {first[:500]} (unexpected: run again with -v for the traceback, "
        "and report it with that)"
    )


def trouble(e: Exception, cache_dir: str | None) -> str:
    """What is wrong with the kernel cache, and what to do about it."""
    where = resolve_cache_dir(cache_dir)
    if isinstance(e, OptionsError):
        return f"{e}"
    if isinstance(e, CacheReadOnly):
        return f"{e}; this command writes to it: run it as the cache's owner, {ELSEWHERE}"
    if isinstance(e, CacheUnavailable) and e.__cause__ is not None:
        e = e.__cause__  # type: ignore[assignment]  # what _open met, without its advice
    what = f"{type(e).__name__}: {e}"
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"the disk of {e.filename or where} is full ({what}); free space, {ELSEWHERE}"
    if isinstance(e, OSError) and e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"cannot write {e.filename or where} ({what}); fix its permissions, {ELSEWHERE}"
    return (
        f"cannot use the kernel cache in {where} ({what}); check that its kernels/cache.db is "
        f"a file (move a damaged one aside: the cache starts empty), {ELSEWHERE}"
    )
