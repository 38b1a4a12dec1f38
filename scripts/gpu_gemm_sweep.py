"""Driver: the codegen GEMM template against cuBLAS and Inductor over its default knobs and
Inductor's H100 tile configurations (kernelpro_backend/bench/gemm_sweep.py holds the sweep).

    OUT=/tmp/out python scripts/gpu_gemm_sweep.py [--budget-s 210] [--max-configs 14] [--only TEXT]
"""

import argparse
import sys

from kernelpro_backend.bench.gemm_sweep import sweep


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--budget-s", type=float, default=210.0, help="stop starting configs after this"
    )
    parser.add_argument(
        "--max-configs", type=int, default=14, help="configs per case, default first"
    )
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny sizes, Triton interpreter")
    parser.add_argument(
        "--only", action="append", default=[], help="run only cases whose name contains this"
    )
    args = parser.parse_args(argv)
    return sweep(args.budget_s, args.max_configs, args.cpu_smoke, args.only)


if __name__ == "__main__":
    sys.exit(main())
