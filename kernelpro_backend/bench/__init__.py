"""kernelpro's benchmark harness and search-log report.

Owns: the built-in workloads, KernelBench problem loading, running every mode (eager,
Inductor, Inductor max-autotune, kernelpro) in one process with correctness checks against
eager, the tables/JSON/plots of the results, the search-log HTML report, and `kernelpro demo`'s
training steps side by side (demo).
Must not: search, cache or generate kernels (it only calls torch.compile), or parse command
lines (`kernelpro bench` and `kernelpro report` live in kernelpro_backend/cli/).
"""
