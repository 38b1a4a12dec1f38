"""The `kernelpro` command line: thin wrappers over the library.

Owns: argument parsing and printing. Must not: hold logic the library lacks.

    kernelpro --version
    kernelpro explain kernelpro_backend.examples:transformer_block
    kernelpro demo
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from . import __version__


def load_factory(spec: str) -> Callable[[], Any]:
    """'package.module:function' -> the function (which returns (model, example_inputs))."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SystemExit(
            f"kernelpro: expected MODULE:FN (e.g. kernelpro_backend.examples:mlp), got {spec!r}"
        )
    sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise SystemExit(f"kernelpro: cannot import {module_name!r}: {e}") from None
    try:
        return getattr(module, attr)  # type: ignore[no-any-return]
    except AttributeError:
        raise SystemExit(f"kernelpro: module {module_name!r} has no attribute {attr!r}") from None


def model_and_inputs(spec: str) -> tuple[Any, tuple[Any, ...]]:
    result = load_factory(spec)()
    if not (isinstance(result, (tuple, list)) and len(result) >= 2):
        raise SystemExit(f"kernelpro: {spec} must return (model, example_inputs)")
    model, inputs = result[0], result[1]
    if not isinstance(inputs, (tuple, list)):
        inputs = (inputs,)
    return model, tuple(inputs)


def _cmd_explain(args: argparse.Namespace) -> int:
    from .explain import explain, format_table

    model, inputs = model_and_inputs(args.target)
    rows = explain(model, *inputs)
    print(format_table(rows))
    kinds: dict[str, int] = {}
    for r in rows:
        kinds[r.kind] = kinds.get(r.kind, 0) + 1
    print(f"\n{len(rows)} subgraphs: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))
    return 0


def _cmd_warmup(args: argparse.Namespace) -> int:
    from .warmup import warmup

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


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(steps=args.steps)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelpro",
        description="kernelpro: a torch.compile backend that searches, proves and caches faster "
        "GPU kernels. Use it with torch.compile(model, backend='kernelpro').",
    )
    parser.add_argument("--version", action="version", version=f"kernelpro {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the backend does")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser(
        "explain",
        help="list the fusable subgraphs of a model (forward and backward)",
        description="MODULE:FN names a function returning (model, example_inputs).",
    )
    p.add_argument("target", metavar="MODULE:FN")
    p.set_defaults(func=_cmd_explain)

    p = sub.add_parser(
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
    p.set_defaults(func=_cmd_warmup)

    from .bench import add_cli as add_bench_cli
    from .cache.cli import add_cli as add_cache_cli
    from .profilers.cli import add_cli as add_profile_cli

    add_cache_cli(sub)
    add_profile_cli(sub)
    add_bench_cli(sub)

    p = sub.add_parser("demo", help="compile a transformer block with the backend and time it")
    p.add_argument("--steps", type=int, default=20, help="timed training steps (default 20)")
    p.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s"
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
