"""`kernelpro explain MODULE:FN`: the fusable subgraphs of a model, as a table.

Owns: the `explain` arguments and printout. Must not: find subgraphs itself (explain.py does).
"""

from __future__ import annotations

import argparse
from typing import Any

from .target import model_and_inputs


def add_cli(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "explain",
        help="list the fusable subgraphs of a model (forward and backward)",
        description="MODULE:FN names a function returning (model, example_inputs).",
    )
    p.add_argument("target", metavar="MODULE:FN")
    p.set_defaults(func=run_explain)


def run_explain(args: argparse.Namespace) -> int:
    from ..explain import REWRITES, explain_model, format_breaks, format_notes, format_table

    model, inputs = model_and_inputs(args.target)
    relied: list[str] = []
    notes: list[Any] = []
    breaks: list[Any] = []
    rows, rewrites = explain_model(model, *inputs, relied_on=relied, notes=notes, breaks=breaks)
    print(format_table(rows))
    kinds: dict[str, int] = {}
    for r in rows:
        kinds[r.kind] = kinds.get(r.kind, 0) + 1
    print(f"\n{len(rows)} subgraphs: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))
    made = [f"  {n} x {REWRITES.get(name, name)}" for name, n in rewrites.items() if n]
    if made:
        print("torch-level rewrites made before the subgraphs were cut:", *made, sep="\n")
    if notes:
        print("chains the torch-level rewrites looked at:", format_notes(notes), sep="\n")
    if breaks:
        print(
            f"{len(breaks)} graph break(s) in the model's code (each splits the graphs kernelpro "
            "sees; a chain cut by one cannot be rewritten):",
            format_breaks(breaks),
            sep="\n",
        )
    if relied:
        print(
            "relied on the values of (a causal mask read from a buffer, run as is_causal=True; "
            "a compile checks each call that they did not change, and re-reads them if they "
            "did): " + ", ".join(dict.fromkeys(relied))
        )
    return 0
