"""PNG charts of a bench report: speedup bars per workload and a roofline of subgraphs (under
the device's measured roofs the report carries).

Owns: drawing with matplotlib, imported lazily: matplotlib is not a dependency of kernelpro,
so without it `write_plots` draws nothing and says so.
Must not: compute results (it reads a `BenchReport`).
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

from .modes import EAGER, INDUCTOR
from .results import BenchReport, WorkloadResult

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


def bar_height(w: WorkloadResult, mode: str, over: str) -> float:
    """The speedup (1 where the mode ran `over`'s own code); 0 where the mode ran but failed or
    differs from eager; NaN (no bar) where the workload's run did not include the mode."""
    if w.mode(mode) is None or w.mode(over) is None:
        return math.nan
    return w.counted_speedup(mode, over) or 0.0


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
        values = [bar_height(w, mode, over) for w in report.workloads]
        xs = [j + (i - (len(modes) - 1) / 2) * width for j in range(len(names))]
        ax.bar(xs, values, width, label=mode)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right")
    ax.set_ylabel(f"speedup over {over} (x)")
    ax.set_title(f"{report.device_name}: speedup over {over} (0: failed or wrong; none: not run)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


ROOF_NAMES = (  # report.roofs key -> label of the compute roof
    ("bf16_tflops", "BF16 tensor"),
    ("tf32_tflops", "TF32 tensor"),
    ("fp32_tflops", "FP32 FMA"),
)
LABELS_PER_WORKLOAD = 3  # the subgraphs that take the most time get a label; the rest a dot


def roof_lines(
    roofs: dict[str, float], lo: float, hi: float, n: int = 64
) -> list[tuple[str, list[float], list[float]]]:
    """(label, intensities, TFLOP/s) of each roof over [lo, hi] FLOP/byte: min(compute peak,
    intensity x DRAM bandwidth). Empty without a measured DRAM bandwidth."""
    bw = roofs.get("dram_tb_per_s")
    if not bw or lo <= 0 or hi <= lo:
        return []
    xs = [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]
    lines = []
    for key, label in ROOF_NAMES:
        peak = roofs.get(key)
        if peak:
            lines.append((f"{label} {peak:.0f} TFLOP/s, DRAM {bw:.2f} TB/s", xs,
                          [min(peak, x * bw) for x in xs]))  # fmt: skip
    return lines


def labelled(points: list[tuple[str, Any]], per_workload: int = LABELS_PER_WORKLOAD) -> set[int]:
    """Indices of the points worth a label: each workload's `per_workload` slowest."""
    chosen: set[int] = set()
    for name in dict.fromkeys(w for w, _ in points):
        mine = sorted((i for i, (w, _) in enumerate(points) if w == name),
                      key=lambda i: -points[i][1].ms)  # fmt: skip
        chosen.update(mine[:per_workload])
    return chosen


def plot_roofline(report: BenchReport, path: Path) -> Path | None:
    """Each subgraph a point (arithmetic intensity, achieved TFLOP/s of its eager reference),
    coloured by workload, under the device's measured roofs when the report has them."""
    points = [(w.workload, p) for w in report.workloads for p in w.subgraphs]
    points = [(w, p) for w, p in points if p.ms > 0 and p.bytes > 0 and p.flops > 0]
    if not points:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 6))
    intensity = [p.flops / p.bytes for _, p in points]
    achieved = [p.flops / (p.ms * 1e-3) / 1e12 for _, p in points]
    for name in dict.fromkeys(w for w, _ in points):
        idx = [i for i, (w, _) in enumerate(points) if w == name]
        ax.scatter([intensity[i] for i in idx], [achieved[i] for i in idx], s=18, label=name)
    for i in labelled(points):
        wname, p = points[i]
        ax.annotate(f"{wname}:{p.name} {p.ms:.2f} ms", (intensity[i], achieved[i]), fontsize=6,
                    xytext=(3, 3), textcoords="offset points")  # fmt: skip
    lo, hi = min(intensity) / 4, max(intensity) * 4
    for (label, xs, ys), style in zip(
        roof_lines(report.roofs, lo, hi), ("-", "--", ":"), strict=False
    ):
        ax.plot(xs, ys, color="black", linestyle=style, linewidth=0.9, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved TFLOP/s (eager reference of the subgraph)")
    roofs = "" if report.roofs else " (no measured roofs in this report)"
    ax.set_title(f"{report.device_name}: subgraphs on the roofline{roofs}")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_plots(report: BenchReport, directory: str | Path) -> tuple[list[Path], str]:
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
        plot_roofline(report, out / "roofline.png"),
    ]
    files = [p for p in written if p is not None]
    note = (
        "" if any(w.subgraphs for w in report.workloads) else " (no per-subgraph data: no roofline)"
    )
    return files, f"plots written to {out}: {', '.join(p.name for p in files)}{note}"
