"""Micro-profiling: the speed-of-light model, the roofline classifier and the tools that turn
hardware counters, SASS and compiler reports into plain-language `Finding`s.

Must not: change kernels (proposers in search/ act on findings)."""

from .findings import Bottleneck, Finding, Severity

__all__ = ["Bottleneck", "Finding", "Severity"]
