"""PNG charts of a bench report: speedup bars per workload and a roofline of subgraphs.

Owns: drawing with matplotlib, imported lazily: matplotlib is not a dependency of kernelpro,
so without it `write_plots` draws nothing and says so.
Must not: compute results (it reads a `BenchReport`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from .modes import EAGER, INDUCTOR
from .results import BenchReport

MISSING_MATPLOTLIB = (
    "plots skipped: matplotlib is not installed (it is not a kernelpro dependency); "
    "`pip install matplotlib` to get PNG charts"
)


def matplotlib_available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def plot_speedups(report: BenchReport, path: Path, over: str) -> Path | None:
    """Grouped bars: for each workload, each compiled mode's speedup over `over`."""
    modes = [m for m in report.modes if m != over]
    names = [w.workload for w in report.workloads]
    if not modes or not names:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(names) * len(modes) / 2 + 3), 4.5))
    width = 0.8 / len(modes)
    for i, mode in enumerate(modes):
        values = [w.speedup(mode, over) or 0.0 for w in report.workloads]
        xs = [j + (i - (len(modes) - 1) / 2) * width for j in range(len(names))]
        ax.bar(xs, values, width, label=mode)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right")
    ax.set_ylabel(f"speedup over {over} (x)")
    ax.set_title(f"{report.device_name}: speedup over {over} (0 = failed or wrong)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_roofline(
    report: BenchReport, path: Path, peak_tflops: float | None, peak_gbps: float | None
) -> Path | None:
    """Each subgraph a point (arithmetic intensity, achieved TFLOP/s) under the roofs."""
    points = [(w.workload, p) for w in report.workloads for p in w.subgraphs]
    points = [(w, p) for w, p in points if p.ms > 0 and p.bytes > 0 and p.flops > 0]
    if not points:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 5))
    intensity = [p.flops / p.bytes for _, p in points]
    achieved = [p.flops / (p.ms * 1e-3) / 1e12 for _, p in points]
    ax.scatter(intensity, achieved, s=18)
    for (wname, p), x, y in zip(points, intensity, achieved, strict=True):
        ax.annotate(f"{wname}:{p.name}", (x, y), fontsize=6)
    if peak_tflops and peak_gbps:
        lo, hi = min(intensity) / 4, max(intensity) * 4
        xs = [lo * (hi / lo) ** (i / 63) for i in range(64)]
        ax.plot(xs, [min(peak_tflops, x * peak_gbps / 1e3) for x in xs], color="red")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(f"{report.device_name}: subgraphs on the roofline")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_plots(
    report: BenchReport,
    directory: str | Path,
    peak_tflops: float | None = None,
    peak_gbps: float | None = None,
) -> tuple[list[Path], str]:
    """Draw every chart the report has data for. Returns (files written, a message)."""
    if not matplotlib_available():
        return [], MISSING_MATPLOTLIB
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = [
        plot_speedups(report, out / "speedup_vs_eager.png", EAGER),
        plot_speedups(report, out / "speedup_vs_inductor.png", INDUCTOR)
        if INDUCTOR in report.modes
        else None,
        plot_roofline(report, out / "roofline.png", peak_tflops, peak_gbps),
    ]
    files = [p for p in written if p is not None]
    note = (
        "" if any(w.subgraphs for w in report.workloads) else " (no per-subgraph data: no roofline)"
    )
    return files, f"plots written to {out}: {', '.join(p.name for p in files)}{note}"
