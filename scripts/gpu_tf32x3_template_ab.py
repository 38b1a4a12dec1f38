"""Driver: the tf32x3 form as the template renders it now, beside other renderings of the same
form (template_tf32x3.py files given on the command line, e.g. an earlier commit's, taken out
with `git show REV:kernelpro_backend/codegen/template_tf32x3.py > old.py`), each built through
the same alternatives/build path, checked against float64 beside IEEE cuBLAS and timed in one
process. Prints a table; writes $OUT/gpu_tf32x3_template_ab.json.

    OUT=/tmp/out PYTHONPATH=.:scripts python scripts/gpu_tf32x3_template_ab.py old.py [--sizes 2048 4096]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

from tf32x3_common import measure, report, square_case

import kernelpro_backend.codegen.template_tf32x3 as t3
from kernelpro_backend.codegen import build


def rendering(path: str):
    """`render_tf32x3` of another template file, loaded inside kernelpro_backend.codegen so its
    relative imports resolve."""
    name = "kernelpro_backend.codegen._ab_" + os.path.basename(path).replace(".", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.render_tf32x3


def run_size(n: int, others: list[str]) -> dict:
    _, form, inputs, exact, row = square_case(n)
    row["renderings"] = []
    current = t3.render_tf32x3
    for path in ["(current)", *others]:
        entry: dict = {"template": path}
        row["renderings"].append(entry)
        t3.render_tf32x3 = current if path == "(current)" else rendering(path)
        try:
            kernel = build(form)
            measure(entry, lambda kernel=kernel: lambda: kernel(*inputs)[0], exact, row)
        finally:
            t3.render_tf32x3 = current
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("others", nargs="*", help="other template_tf32x3.py files")
    p.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096])
    p.add_argument("--rounds", type=int, default=2, help="repeat the whole comparison")
    a = p.parse_args(argv)
    rows = [run_size(n, a.others) for _ in range(a.rounds) for n in a.sizes]
    report("gpu_tf32x3_template_ab", rows, "renderings", lambda e: e["template"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
