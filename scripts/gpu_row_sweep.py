"""Row-family sweep on the GPU: eager, Inductor and kernelpro's row candidates side by side.

OUT=/tmp/out PYTHONPATH=. python scripts/gpu_row_sweep.py [--budget-s 300] [--only "softmax fwd"]
    [--sizes 4096x65536 | full] [--autotune] [--ring] [--clusters ring] [--seed "num_warps=32"]
Several runs (a full sweep does not fit one GPU call) merge into one report with plots:
scripts/row_sweep_report.py.
"""

from __future__ import annotations

import argparse
import sys

from kernelpro_backend.bench.row_sweep import FULL_SIZES, SIZES, SweepSpace, sweep


def _knobs(text: str) -> tuple[tuple[str, object], ...]:
    """ "num_warps=32 BLOCK_C=2048" -> (("BLOCK_C", 2048), ("num_warps", 32))."""
    out = []
    for part in text.split():
        name, _, value = part.partition("=")
        out.append((name, int(value) if value.lstrip("-").isdigit() else value))
    return tuple(sorted(out))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget-s", type=float, default=300.0)
    p.add_argument(
        "--only", nargs="*", default=[], help='starts of words of case names ("softmax fwd")'
    )
    p.add_argument(
        "--sizes", nargs="*", default=[], help="ROWSxCOLS, or 'full': 256 ... 512k columns"
    )
    p.add_argument("--autotune", action="store_true", help="also time Inductor's max-autotune")
    p.add_argument("--ring", action="store_true", help="also time the seed's one-knob neighbours")
    p.add_argument(
        "--clusters",
        choices=("all", "ring", "none"),
        default="all",
        help="every legal row-resident configuration, the default and its one-knob ring, or "
        "none (the Triton seed and its variants alone)",
    )
    p.add_argument(
        "--seed", nargs="*", default=[], help='seed variants to time too ("num_warps=32 ROWS=2")'
    )
    a = p.parse_args()
    if a.sizes == ["full"]:
        sizes = FULL_SIZES
    else:
        sizes = tuple(tuple(int(v) for v in s.split("x")) for s in a.sizes) or SIZES
    space = SweepSpace(a.ring, a.clusters, tuple(_knobs(k) for k in a.seed))
    sys.exit(sweep(a.budget_s, tuple(a.only), sizes, a.autotune, space))
