"""Driver: what differs between two modes' training steps, kernel by kernel
(kernelpro_backend/bench/trace.py holds the logic).

    OUT=/tmp/out python3 scripts/gpu_trace_modes.py --workload moe [--modes inductor,kernelpro]
"""

import argparse
import sys

from kernelpro_backend.bench.trace import run_trace
from kernelpro_backend.bench.workloads import WORKLOADS


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", required=True, choices=list(WORKLOADS))
    ap.add_argument("--modes", default="inductor,kernelpro")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--device", default="cuda", help="cpu: smoke-test at tiny size")
    args = ap.parse_args(argv)
    return run_trace(args.workload, args.modes, args.steps, args.device)


if __name__ == "__main__":
    sys.exit(main())
