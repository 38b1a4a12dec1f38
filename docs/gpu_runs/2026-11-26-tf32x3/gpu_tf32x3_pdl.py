"""Driver (an experiment): the tf32x3 form with programmatic dependent launch between its split
pass and its product kernel — the product kernel launched with `launch_pdl=True` and waiting
(`gdc_wait`) before its loads, the split pass releasing it at its start — beside the form as
rendered, both checked against float64 and timed against IEEE cuBLAS in one process. Prints a
table; writes $OUT/gpu_tf32x3_pdl.json.

    OUT=/tmp/out PYTHONPATH=.:docs/gpu_runs/common python docs/gpu_runs/2026-11-26-tf32x3/gpu_tf32x3_pdl.py [--cases 2048:mm 2048:linear]
"""

from __future__ import annotations

import argparse
import sys

from tf32x3_common import measure, named_case, report

from kernelpro_backend.codegen import render
from kernelpro_backend.codegen.build import load_module
from kernelpro_backend.codegen.spec import RenderedKernel


def with_pdl(source: str) -> str:
    """The rendered module with the split pass releasing its dependent at once and the product
    kernel launched as one, waiting for the pass's writes before its first load."""
    lines = source.split("\n")
    out = []
    for line in lines:
        if "num_stages=" in line and "_launch(_mm3)" in line:
            line = line[: line.rindex(")")] + ", launch_pdl=True)"
        out.append(line)
        if line.rstrip().endswith("HI: tl.constexpr = True):"):
            out.append("    tl.extra.cuda.gdc_launch_dependents()")
        if line.startswith("def _mm3(") and line.rstrip().endswith("):"):
            out.append("    tl.extra.cuda.gdc_wait()")
    patched = "\n".join(out)
    assert patched.count("gdc_") == 2 and "launch_pdl=True" in patched, "the template changed"
    return patched


def run_case(case: str) -> dict:
    _, form, inputs, exact, row = named_case(case)
    rendered = render(form)
    row["variants"] = []
    for name, source in (("as rendered", rendered.source), ("PDL", with_pdl(rendered.source))):
        entry: dict = {"variant": name}
        row["variants"].append(entry)

        def make(source: str = source):  # type: ignore[no-untyped-def]
            kernel = load_module(RenderedKernel("triton", source, rendered.entry))
            return lambda: kernel(*inputs)[0]

        measure(entry, make, exact, row)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", nargs="+", default=["2048:mm", "2048:linear", "2048x4096x8192:mm"])
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args(argv)
    rows = [run_case(c) for _ in range(a.rounds) for c in a.cases]
    report("gpu_tf32x3_pdl", rows, "variants", lambda e: e["variant"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
