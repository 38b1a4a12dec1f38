"""`kernelpro explain MODULE:FN`: the fusable subgraphs of a model, as a table or JSON.

Owns: the `explain` arguments and printout (reasons whole, wrapped at the terminal's width).
Must not: find subgraphs itself (explain.py does).

`kernelpro explain MODULE:FN --json` prints one object (keys stable; new keys may be added):
    subgraphs     one object per subgraph: graph (forward, backward or inference), kind,
                  pattern, ops, inputs ("f32[32, 64]"), key (digest, or "symbolic"),
                  templates (what a search measures; "none: <reason>" when nothing)
    rewrites      torch-level rewrites made before the subgraphs were cut: {name: count}
    chains        the chains those rewrites looked at: rewrite, node, made (or null), reason
                  (or null), where ("file.py:12")
    graph_breaks  the graph breaks in the model's code: cause, where
    relied_on     the names of the inputs whose values a rewrite relied on (a causal mask in
                  a buffer, a mask an earlier graph proved constant)
    relied_on_checks  one object per input relied on, per graph: name, holds (what it is relied
                  on to hold), check (how a compile checks it on each call)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
from typing import Any

from .target import model_and_inputs


def add_cli(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "explain",
        help="list the fusable subgraphs of a model (forward and backward)",
        description="MODULE:FN names a function returning (model, example_inputs).",
    )
    p.add_argument("target", metavar="MODULE:FN")
    p.add_argument("--json", action="store_true", help="print one JSON object (documented keys)")
    p.set_defaults(func=run_explain)


def run_explain(args: argparse.Namespace) -> int:
    from ..explain import (
        REWRITES,
        ReliedInput,
        explain_model,
        format_breaks,
        format_notes,
        format_relied,
        format_table,
    )

    model, inputs = model_and_inputs(args.target)
    relied: list[ReliedInput] = []
    notes: list[Any] = []
    breaks: list[Any] = []
    rows, rewrites = explain_model(model, *inputs, relied_on=relied, notes=notes, breaks=breaks)
    if args.json:
        found = {
            "subgraphs": [dataclasses.asdict(r) for r in rows],
            "rewrites": rewrites,
            "chains": [dataclasses.asdict(n) for n in notes],
            "graph_breaks": [dataclasses.asdict(b) for b in breaks],
            "relied_on": list(dict.fromkeys(r.name for r in relied)),
            "relied_on_checks": [dataclasses.asdict(r) for r in dict.fromkeys(relied)],
        }
        print(json.dumps(found, indent=1))
        return 0
    width = max(60, shutil.get_terminal_size((100, 24)).columns)
    print(format_table(rows, width))
    kinds: dict[str, int] = {}
    for r in rows:
        kinds[r.kind] = kinds.get(r.kind, 0) + 1
    print(f"\n{len(rows)} subgraphs: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))
    made = [f"  {n} x {REWRITES.get(name, name)}" for name, n in rewrites.items() if n]
    if made:
        print("torch-level rewrites made before the subgraphs were cut:", *made, sep="\n")
    if notes:
        print("chains the torch-level rewrites looked at:", format_notes(notes, width), sep="\n")
    if breaks:
        print(
            f"{len(breaks)} graph break(s) in the model's code (each splits the graphs kernelpro "
            "sees; a chain cut by one cannot be rewritten):",
            format_breaks(breaks, width),
            sep="\n",
        )
    if relied:
        print(
            "relied on the values of (inputs: what they hold; how a compile checks it):",
            format_relied(relied, width),
            sep="\n",
        )
    return 0
