"""`kernelpro warmup MODULE:FN`: search every subgraph of a model that the cache lacks.

Owns: the `warmup` arguments, turning them into warmup options, and the printout.
Must not: search or cache by itself (warmup.py does).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .target import model_and_inputs


def add_cli(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "warmup",
        help="search every subgraph of a model that the cache lacks (resumable)",
        description="MODULE:FN returns (model, example_inputs). Searches forward and backward "
        "subgraphs on this GPU and stores each winner as soon as it is found.",
    )
    p.add_argument("target", metavar="MODULE:FN")
    p.add_argument("--budget-s", type=float, default=None, help="search seconds per subgraph")
    p.add_argument("--max-trials", type=int, default=None, help="search trials per subgraph")
    p.add_argument("--no-train", action="store_true", help="inference graph only (no backward)")
    p.add_argument("--cache-dir", default=None, help="cache directory to fill")
    p.add_argument(
        "--patterns",
        default=None,
        help="search only these subgraph patterns, comma-separated (as `explain` names them, "
        "e.g. sdpa_backward,rms_norm); default: all",
    )
    p.set_defaults(func=run_warmup)


def run_warmup(args: argparse.Namespace) -> int:
    from ..warmup import warmup

    model, inputs = model_and_inputs(args.target)
    options: dict[str, Any] = {}
    if args.cache_dir:
        options["cache_dir"] = args.cache_dir
    if args.max_trials:
        options["max_trials"] = args.max_trials
    if args.patterns:
        options["search_patterns"] = args.patterns
    try:
        report = warmup(
            model, inputs, train=not args.no_train, budget_s=args.budget_s, options=options
        )
    except RuntimeError as e:
        print(f"kernelpro warmup: {e}", file=sys.stderr)
        return 2
    print(report.table())
    return 0
