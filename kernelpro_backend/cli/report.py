"""`kernelpro report LOG`: a search log (JSON lines) rendered as one HTML page.

Owns: the `report` arguments and what it prints. Must not: render anything (bench/report.py
does).

    kernelpro report search.jsonl --out search.html
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_cli(subparsers: Any) -> None:
    r = subparsers.add_parser("report", help="render a search log (JSON lines) as an HTML page")
    r.add_argument("log", metavar="LOG", help="search log written by kernelpro's search")
    r.add_argument("--out", metavar="FILE.html", help="default: LOG with .html")
    r.set_defaults(func=run_report)


def run_report(args: argparse.Namespace) -> int:
    from ..bench.report import ReportError, write_report

    out = Path(args.out) if args.out else Path(args.log).with_suffix(".html")
    try:
        summary = write_report(args.log, out)
    except ReportError as e:
        print(f"kernelpro report: {e}", file=sys.stderr)
        return 2
    print(f"report written to {out}: {summary}")
    return 0
