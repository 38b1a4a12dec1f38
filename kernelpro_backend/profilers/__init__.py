"""Micro-profiling: the roofline classifier (stage 1) and the tools that turn hardware
counters, SASS and compiler reports into plain-language `Finding`s (stage 2); the speed of
light and the library calls' measured time a warm-up plans its searches by (anchors.py).

Must not: change kernels (proposers in search/ act on findings)."""

from .api import ProfileReport, profile_kernel
from .findings import Bottleneck, Finding, Severity
from .roofline import RooflineReport, Roofs, classify
from .tools import ProfileTarget, Tool, tools_for

__all__ = [
    "Bottleneck",
    "Roofs",
    "Finding",
    "ProfileReport",
    "ProfileTarget",
    "RooflineReport",
    "Severity",
    "Tool",
    "classify",
    "profile_kernel",
    "tools_for",
]
