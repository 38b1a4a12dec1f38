"""Merge row-sweep runs (scripts/gpu_row_sweep.py's JSON), check the [rows] targets, plot.

    PYTHONPATH=. python scripts/row_sweep_report.py OUT_DIR RUN.json [RUN.json ...]

Writes OUT_DIR/row_sweep_merged.json (with its checks) and one SVG per op, pass and dtype;
prints the checks. Runs on the CPU.
"""

from __future__ import annotations

import argparse
import json
import sys

from kernelpro_backend.bench.row_report import write_report

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out_dir")
    p.add_argument("runs", nargs="+", help="gpu_row_sweep.json files, oldest first")
    a = p.parse_args()
    docs = []
    for path in a.runs:
        with open(path) as f:
            docs.append(json.load(f))
    found = write_report(docs, a.out_dir)
    median = found["median_shipped_roof_fraction"]
    print(
        f"{found['cases']} cases, {len(found['missing'])} missing; roof {found['roof_tb_s']} TB/s"
    )
    print(f"median shipped: {median:.1%} of the roof" if median is not None else "no roof")
    print(f"max-autotune timed in {found['max_autotune_timed']} cases")
    for line in found["kernel_lost"]:
        print(f"kernel lost: {line}")
    for line in found["behind_max_autotune"]:
        print(f"behind max-autotune: {line}")
    sys.exit(0)
