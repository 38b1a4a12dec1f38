"""`kernelpro report LOG`: a search log (JSON lines) rendered as one HTML page.

Owns: the `report` arguments and what it prints. Must not: render anything (bench/report.py
does).

    kernelpro report search.jsonl --out search.html
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any


def add_cli(subparsers: Any) -> None:
    r = subparsers.add_parser("report", help="render a search log (JSON lines) as an HTML page")
    r.add_argument("log", metavar="LOG", help="search log written by kernelpro's search")
    r.add_argument(
        "--out",
        metavar="FILE.html",
        help="default: LOG with .html (LOG.report.html for a LOG.html)",
    )
    r.set_defaults(func=run_report)


def run_report(args: argparse.Namespace) -> int:
    from ..bench.report import ReportError, write_report

    log = Path(args.log)
    out = Path(args.out) if args.out else log.with_suffix(".html")
    if _same_file(out, log) and not args.out:  # a log named .html: a name beside it
        out = log.with_name(f"{log.stem}.report.html")
    if _same_file(out, log):
        print(f"kernelpro report: --out {out} is the search log itself; name another file",
              file=sys.stderr)  # fmt: skip
        return 1
    try:
        summary = write_report(args.log, out)
    except ReportError as e:
        print(f"kernelpro report: {e}", file=sys.stderr)
        return 2
    print(f"report written to {out}: {summary}")
    return 0


def _same_file(a: Path, b: Path) -> bool:
    """Whether writing `a` would overwrite `b`: the same path once links are resolved, or the
    same file (a hard link)."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist
        return False
