"""Driver: the tf32x3 form as the template renders it now, beside other renderings of the same
form (each orientation forced, and template_tf32x3.py files given on the command line, e.g. an earlier commit's, taken out
with `git show REV:kernelpro_backend/codegen/template_tf32x3.py > old.py`), each built through
the same alternatives/build path, checked against float64 beside IEEE cuBLAS and timed in one
process. Prints a table; writes $OUT/gpu_tf32x3_template_ab.json.

    OUT=/tmp/out PYTHONPATH=.:docs/gpu_runs/common python docs/gpu_runs/2026-11-26-tf32x3/gpu_tf32x3_template_ab.py old.py [--cases 2048:mm 2048x4096x8192:linear]
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import sys

from tf32x3_common import measure, named_case, report

import kernelpro_backend.codegen.templates.tf32x3 as t3
from kernelpro_backend.codegen import build

STAGES = t3.STAGES  # the template's own depth


def rendering(path: str):
    """`render_tf32x3` of another template file, loaded inside kernelpro_backend.codegen so its
    relative imports resolve."""
    name = "kernelpro_backend.codegen._ab_" + os.path.basename(path).replace(".", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module.render_tf32x3


def run_case(case: str, others: list[str], stages: list[int]) -> dict:
    """`case`: 'N:layout' or 'MxNxK:layout' (layout mm or linear)."""
    _, form, inputs, exact, row = named_case(case)
    row["renderings"] = []
    current = t3.render_tf32x3
    forced = {
        f"(current, {'swapped' if o.swapped else 'normal'}{', raw' if o.raw else ''})": o
        for o in t3.orientations(form)
    }
    depths = {f"(current, {n} stages)": n for n in stages}
    for path in ["(current)", *forced, *depths, *others]:
        entry: dict = {"template": path}
        row["renderings"].append(entry)
        t3.STAGES = depths.get(path, STAGES)
        if path in forced:
            t3.render_tf32x3 = functools.partial(current, orientation=forced[path])
        else:
            t3.render_tf32x3 = current if path == "(current)" or path in depths else rendering(path)
        try:
            kernel = build(form)
            measure(entry, lambda kernel=kernel: lambda: kernel(*inputs)[0], exact, row)
        finally:
            t3.render_tf32x3, t3.STAGES = current, STAGES
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("others", nargs="*", help="other template_tf32x3.py files")
    p.add_argument(
        "--cases",
        nargs="+",
        default=["2048:mm", "2048:linear", "2048x4096x8192:mm", "4096:mm"],
        help="N:layout or MxNxK:layout, layout mm (x @ w) or linear (x @ w.T)",
    )
    p.add_argument("--rounds", type=int, default=2, help="repeat the whole comparison")
    p.add_argument("--stages", type=int, nargs="*", default=[], help="also these pipeline depths")
    a = p.parse_args(argv)
    rows = [run_case(c, a.others, a.stages) for _ in range(a.rounds) for c in a.cases]
    report("gpu_tf32x3_template_ab", rows, "renderings", lambda e: e["template"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
