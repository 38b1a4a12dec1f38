"""CUDA C++ kernels outside Triton: the launch-header contract of a free-form CUDA candidate
(source, expr, plan), compiling to a cubin (compile), loading and launching cubins with the
driver API (driver), sources with a host entry point built into shared libraries (host), and
what was built, known by content (built).

Must not: decide what to try or render sources (search/ and codegen/ do).
"""
