"""A small inline SVG line chart (no JavaScript, no external files) for HTML reports.

Owns: scaling points into a viewBox, axes with a few ticks, a step line and dots
(`line_chart`), and several named lines with a legend and a labelled reference (`series_chart`).
Must not: read logs or know what the numbers mean.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence


def _ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / count
    step = 10 ** math.floor(math.log10(raw))
    for mult in (1, 2, 5, 10):
        if raw <= mult * step:
            step *= mult
            break
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def _frame(
    title: str,
    title_x: float,
    size: tuple[int, int],
    margins: tuple[int, int, int, int],
    y_range: tuple[float, float],
    sy: Callable[[float], float],
) -> list[str]:
    """The <svg> opening, title, axes and horizontal grid with y labels."""
    (width, height), (left, right, top, bottom), (y_lo, y_hi) = size, margins, y_range
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f'<text x="{title_x}" y="16" text-anchor="middle" font-size="13">'
        f"{html.escape(title)}</text>",
        f'<line x1="{left}" y1="{sy(y_lo)}" x2="{width - right}" y2="{sy(y_lo)}" stroke="#333"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#333"/>',
    ]
    for y in _ticks(y_lo, y_hi):
        parts.append(
            f'<text x="{left - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:g}</text>'
            f'<line x1="{left}" y1="{sy(y):.1f}" x2="{width - right}" y2="{sy(y):.1f}" '
            'stroke="#eee"/>'
        )
    return parts


def line_chart(
    line: Sequence[tuple[float, float]],
    dots: Sequence[tuple[float, float]] = (),
    title: str = "",
    x_label: str = "",
    y_label: str = "",
    reference_y: float | None = None,
    width: int = 640,
    height: int = 300,
) -> str:
    """An <svg> element: `line` drawn as a step line, `dots` as circles, an optional dashed
    horizontal reference line (e.g. speedup 1.0)."""
    pts = list(line) + list(dots)
    if not pts:
        return f'<svg width="{width}" height="60"><text x="10" y="30">no data</text></svg>'
    left, right, top, bottom = 60, 20, 30, 45
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts] + ([reference_y] if reference_y is not None else [])
    x_lo, x_hi = min(xs), max(xs)
    y_lo, y_hi = min(0.0, min(ys)), max(ys) * 1.1 or 1.0
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1

    def sx(x: float) -> float:
        return left + (x - x_lo) / (x_hi - x_lo) * (width - left - right)

    def sy(y: float) -> float:
        return height - bottom - (y - y_lo) / (y_hi - y_lo) * (height - top - bottom)

    parts = _frame(title, width / 2, (width, height), (left, right, top, bottom), (y_lo, y_hi), sy)
    for x in _ticks(x_lo, x_hi):
        parts.append(
            f'<text x="{sx(x):.1f}" y="{height - bottom + 15}" text-anchor="middle">{x:g}</text>'
        )
    if reference_y is not None:
        parts.append(
            f'<line x1="{left}" y1="{sy(reference_y):.1f}" x2="{width - right}" '
            f'y2="{sy(reference_y):.1f}" stroke="#999" stroke-dasharray="4 3"/>'
        )
    if line:
        path = []
        for i, (x, y) in enumerate(line):
            if i:
                path.append(f"L{sx(x):.1f},{sy(line[i - 1][1]):.1f}")
            path.append(f"{'M' if i == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}")
        parts.append(f'<path d="{" ".join(path)}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
    for x, y in dots:
        parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="#ff7f0e"/>')
    parts.append(
        f'<text x="{width / 2}" y="{height - 8}" text-anchor="middle">{html.escape(x_label)}</text>'
        f'<text x="14" y="{height / 2}" text-anchor="middle" '
        f'transform="rotate(-90 14 {height / 2})">{html.escape(y_label)}</text>'
    )
    parts.append("</svg>")
    return "\n".join(parts)


PALETTE = ("#7f7f7f", "#1f77b4", "#9467bd", "#d62728", "#2ca02c", "#ff7f0e")


def series_chart(
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    title: str = "",
    x_label: str = "",
    y_label: str = "",
    reference: tuple[str, float] | None = None,
    log2_x: bool = True,
    width: int = 640,
    height: int = 320,
) -> str:
    """An <svg> element: each (name, points) series as a line with dots in its own colour, a
    legend, an optional dashed, labelled horizontal reference line (e.g. the DRAM roof); x on a
    log2 axis by default (row lengths)."""
    pts = [p for _, line in series for p in line]
    if not pts:
        return f'<svg width="{width}" height="60"><text x="10" y="30">no data</text></svg>'
    left, right, top, bottom = 60, 130, 30, 45

    def fx(x: float) -> float:
        return math.log2(x) if log2_x else x

    xs = [fx(p[0]) for p in pts]
    ys = [p[1] for p in pts] + ([reference[1]] if reference else [])
    x_lo, x_hi = min(xs), max(xs)
    y_lo, y_hi = 0.0, max(ys) * 1.1 or 1.0
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1

    def sx(x: float) -> float:
        return left + (fx(x) - x_lo) / (x_hi - x_lo) * (width - left - right)

    def sy(y: float) -> float:
        return height - bottom - (y - y_lo) / (y_hi - y_lo) * (height - top - bottom)

    centre = (width - right + left) / 2
    parts = _frame(title, centre, (width, height), (left, right, top, bottom), (y_lo, y_hi), sy)
    for x in sorted({p[0] for p in pts}):
        label = f"{x / 1024:g}k" if log2_x and x >= 1024 else f"{x:g}"
        parts.append(
            f'<text x="{sx(x):.1f}" y="{height - bottom + 15}" text-anchor="middle">{label}</text>'
        )
    if reference is not None:
        name, y = reference
        parts.append(
            f'<line x1="{left}" y1="{sy(y):.1f}" x2="{width - right}" y2="{sy(y):.1f}" '
            f'stroke="#999" stroke-dasharray="4 3"/><text x="{width - right + 4}" '
            f'y="{sy(y) + 4:.1f}" fill="#666">{html.escape(name)}</text>'
        )
    for k, (name, line) in enumerate(series):
        colour = PALETTE[k % len(PALETTE)]
        xy = [(sx(x), sy(y)) for x, y in sorted(line)]
        parts += _series(xy, colour, name, width - right + 8, top + 24 + 14 * k)
    parts.append(
        f'<text x="{(width - right + left) / 2}" y="{height - 8}" text-anchor="middle">'
        f"{html.escape(x_label)}</text>"
        f'<text x="14" y="{height / 2}" text-anchor="middle" '
        f'transform="rotate(-90 14 {height / 2})">{html.escape(y_label)}</text>'
    )
    parts.append("</svg>")
    return "\n".join(parts)


def _series(xy: list[tuple[float, float]], colour: str, name: str, x: float, y: float) -> list[str]:
    """A series' line (two points or more), its dots, and its legend entry at (x, y)."""
    out = []
    if len(xy) > 1:
        path = " ".join(f"{'M' if i == 0 else 'L'}{a:.1f},{b:.1f}" for i, (a, b) in enumerate(xy))
        out.append(f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
    out += [f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="{colour}"/>' for a, b in xy]
    out.append(
        f'<rect x="{x}" y="{y}" width="10" height="3" fill="{colour}"/>'
        f'<text x="{x + 14}" y="{y + 5}">{html.escape(name)}</text>'
    )
    return out
