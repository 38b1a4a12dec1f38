"""Driver: the codegen GEMM template against cuBLAS and Inductor over its default knobs and
Inductor's H100 tile configurations (kernelpro_backend/bench/gemm_sweep.py holds the sweep).

    OUT=/tmp/out python scripts/gpu_gemm_sweep.py [--budget-s 210] [--max-configs 14] [--only TEXT]
"""

import sys

from kernelpro_backend.bench.gemm_sweep import main

if __name__ == "__main__":
    sys.exit(main())
