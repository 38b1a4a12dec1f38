"""Driver: what differs between two modes' training steps, kernel by kernel
(kernelpro_backend/bench/trace.py holds the logic).

    OUT=/tmp/out python3 scripts/gpu_trace_modes.py --workload moe [--modes inductor,kernelpro]
"""

import sys

from kernelpro_backend.bench.trace import main

if __name__ == "__main__":
    sys.exit(main())
