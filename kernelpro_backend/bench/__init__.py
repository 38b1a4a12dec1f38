"""kernelpro's benchmark harness and search-log report.

Owns: the built-in workloads, KernelBench problem loading, running every mode (eager,
Inductor, Inductor max-autotune, kernelpro) in one process with correctness checks against
eager, the tables/JSON/plots of the results, and `kernelpro report` (search log -> HTML).
Must not: search, cache or generate kernels (it only calls torch.compile).

The CLI wiring: `add_cli(subparsers)` adds `bench` and `report`; each sets `func`.
"""

from __future__ import annotations

from .cli import add_cli, run_bench, run_report

__all__ = ["add_cli", "run_bench", "run_report"]
