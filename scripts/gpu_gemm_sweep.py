"""Driver: the GEMM sweep (kernelpro_backend/bench/gemm_sweep.py, cases in bench/gemm_cases.py):
cuBLAS, Inductor, max-autotune, the template's seed, its configurations and a search, per case.

    OUT=/tmp/out python scripts/gpu_gemm_sweep.py [--group square] [--problems kb] \\
        [--autotune TEXT|all] [--search-s 30 --search-only TEXT|all] [--budget-s 560] \\
        [--config BLOCK_N=128,num_warps=4 ...]
    python scripts/gpu_gemm_sweep.py --merge a.json b.json ... --out merged.json   # one table
"""

import argparse
import json
import sys
from pathlib import Path

from kernelpro_backend.bench.gemm_sweep import sweep
from kernelpro_backend.bench.gemm_table import merge, table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--budget-s", type=float, default=560.0, help="stop starting cases after this"
    )
    parser.add_argument(
        "--max-configs", type=int, default=8, help="configs per case, default first"
    )
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny sizes, Triton interpreter")
    parser.add_argument(
        "--only", action="append", default=[], help="run only cases whose name contains this"
    )
    parser.add_argument(
        "--group", action="append", default=[],
        help="square | training | epilogue | kernelbench (repeatable)",
    )  # fmt: skip
    parser.add_argument("--problems", help="a KernelBench directory (the kernelbench group)")
    parser.add_argument(
        "--autotune", action="append", default=[],
        help="also time max-autotune on cases whose name contains this ('all': every case)",
    )  # fmt: skip
    parser.add_argument("--search-s", type=float, default=0.0, help="search budget per case")
    parser.add_argument(
        "--search-only", action="append", default=[],
        help="search cases whose name contains this ('all': every case)",
    )  # fmt: skip
    parser.add_argument(
        "--config", action="append", default=[], metavar="KNOB=VALUE,...",
        help="also time the default configuration with these knobs changed (timed first; "
        "repeatable), e.g. BLOCK_N=128,num_warps=4,PERSISTENT=True",
    )  # fmt: skip
    parser.add_argument("--merge", nargs="+", metavar="JSON", help="merge these runs, run none")
    parser.add_argument("--out", help="with --merge: where the merged JSON goes")
    args = parser.parse_args(argv)
    if args.merge:
        merged = merge([json.loads(Path(p).read_text()) for p in args.merge])
        if args.out:
            with open(args.out, "w") as f:
                json.dump(merged, f, indent=1)
        print(table(merged["meta"], merged["results"]))
        return 0
    return sweep(
        args.budget_s, args.max_configs, args.cpu_smoke, args.only, args.group, args.problems,
        args.autotune, args.search_s, args.search_only, [_knobs(c) for c in args.config],
    )  # fmt: skip


def _knobs(text: str) -> dict:
    """'BLOCK_N=128,LOADS=tma,PERSISTENT=True' -> {'BLOCK_N': 128, 'LOADS': 'tma', ...}."""
    out: dict = {}
    for part in filter(None, text.split(",")):
        name, _, value = part.partition("=")
        low = value.strip().lower()
        out[name.strip()] = (
            int(value)
            if value.strip().isdigit()
            else {"true": True, "false": False}.get(low, value.strip())
        )
    return out


if __name__ == "__main__":
    sys.exit(main())
