"""`kernelpro report`: a search log (JSON lines, format in the shared contracts) as one
self-contained HTML page.

Owns: parsing the log into searches (one per "start" event), the trial tree (parent/child from
"parent"), and the page: each search's header and outcome, the tree as nested lists with the
findings at each node (and which profiling tools ran or were skipped), and the best speedup
over trials as an inline SVG chart.
The log is read within limits (cache/limits.py: its size, each line's size and nesting depth);
a line over one is skipped with the limit named, like a line that is not JSON.
Must not: run or re-measure anything; no external JS or CSS.
"""

from __future__ import annotations

import dataclasses
import html
import json
from pathlib import Path
from typing import Any

from ..cache.limits import MAX_LOG_BYTES, LimitExceeded, loads_bounded, read_text_bounded
from ..cache.printable import printable
from .svg import line_chart

MAX_LINE_BYTES = 16 * 2**20  # one event: a trial with its candidate's source and findings


class ReportError(ValueError):
    """The log cannot be read or holds no search events."""


@dataclasses.dataclass
class SearchLog:
    start: dict[str, Any] | None = None
    trials: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    end: dict[str, Any] | None = None


@dataclasses.dataclass
class ParsedLog:
    searches: list[SearchLog]
    skipped: list[str]  # "line N: why" for lines that are not events


def parse_log(text: str) -> ParsedLog:
    searches: list[SearchLog] = []
    skipped: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:  # a log may come from elsewhere: each line within the size and depth limits
            event = loads_bounded(line, f"line {number}", MAX_LINE_BYTES)
        except ValueError as e:  # not JSON (e.g. a cut-off last line), too long or too deep
            skipped.append(printable(str(e))[:200])
            continue
        kind = event.get("event") if isinstance(event, dict) else None
        if kind == "start" or (kind in ("trial", "end") and not searches):
            searches.append(SearchLog())
        if kind == "start":
            searches[-1].start = event
        elif kind == "trial":
            searches[-1].trials.append(event)
        elif kind == "end":
            searches[-1].end = event
        else:
            skipped.append(f"line {number}: unknown event {kind!r}")
    return ParsedLog(searches, skipped)


def _fmt(value: Any, fmt: str = ".4g") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return format(value, fmt)
    return html.escape(str(value))


def _finding(f: dict[str, Any]) -> str:
    sev = html.escape(str(f.get("severity", "?")))
    head = f"{html.escape(str(f.get('tool', '?')))}.{html.escape(str(f.get('metric', '?')))}"
    value = f"= {_fmt(f.get('value'))}"
    if f.get("threshold") is not None:
        value += f" (threshold {_fmt(f.get('threshold'))})"
    text = f'<li class="finding sev-{sev}"><b>[{sev}]</b> {head} {value}: '
    text += html.escape(str(f.get("guidance", "")))
    if f.get("suggestion"):
        text += f" <i>suggests {html.escape(json.dumps(f['suggestion'], sort_keys=True))}</i>"
    return text + "</li>"


def _node(trial: dict[str, Any]) -> str:
    candidate = json.dumps(trial.get("candidate"), sort_keys=True)
    if len(candidate) > 300:
        candidate = candidate[:297] + "..."
    status = html.escape(str(trial.get("status", "?")))
    parts = [
        f'<span class="node" id="trial-{_fmt(trial.get("id"))}"><b>#{_fmt(trial.get("id"))}</b> '
        f"{_fmt(trial.get('move'))} "
        f'<span class="status-{status}">{status}</span> '
        f"{_fmt(trial.get('median_ms'))} ms, speedup {_fmt(trial.get('speedup'), '.3g')}x, "
        f"SOL {_fmt(trial.get('sol_fraction'), '.2%')}, reward {_fmt(trial.get('reward'), '.3g')}"
        "</span>",
        f'<div class="cand"><code>{html.escape(candidate)}</code></div>',
    ]
    findings = trial.get("findings") or []
    if findings:
        parts.append('<ul class="findings">' + "".join(_finding(f) for f in findings) + "</ul>")
    profiled = _profiled(trial)
    if profiled:
        parts.append(f'<div class="tools">{profiled}</div>')
    if trial.get("phase_s"):
        parts.append(f'<div class="tools">seconds: {_seconds(trial["phase_s"])}</div>')
    return "".join(parts)


def _seconds(phases: Any) -> str:
    """'compile 1.2, time 0.31' from a {phase: seconds} mapping (none: '-')."""
    if not isinstance(phases, dict) or not phases:
        return "-"
    return html.escape(", ".join(f"{k} {_fmt(v, '.3g')}" for k, v in phases.items()))


def _profiled(trial: dict[str, Any]) -> str:
    """'profiled with ptxas; skipped sass (why)' from a trial's stage-2 fields, if any."""
    ran = [str(t) for t in trial.get("tools_run") or []]
    skipped = [p for p in trial.get("tools_skipped") or [] if isinstance(p, list) and len(p) == 2]
    parts = [f"profiled with {', '.join(ran)}"] if ran else []
    parts += [f"skipped {name} ({why})" for name, why in skipped]
    if trial.get("feedback_error"):
        parts.append(f"feedback failed: {trial['feedback_error']}")
    return html.escape("; ".join(parts))


def _tree(trials: list[dict[str, Any]]) -> str:
    by_id = {t.get("id"): t for t in trials}
    children: dict[Any, list[dict[str, Any]]] = {}
    roots = []
    for t in trials:
        parent = t.get("parent")
        if parent is None or parent not in by_id or parent == t.get("id"):
            roots.append(t)
        else:
            children.setdefault(parent, []).append(t)
    seen: set[Any] = set()

    def render(t: dict[str, Any]) -> str:
        seen.add(t.get("id"))
        kids = [c for c in children.get(t.get("id"), []) if c.get("id") not in seen]
        inner = "".join(f"<li>{render(c)}</li>" for c in kids)
        return _node(t) + (f"<ul>{inner}</ul>" if inner else "")

    items = [f"<li>{render(t)}</li>" for t in roots]
    # Trials on a parent cycle are unreachable from a root: list them so none is lost.
    items += [f"<li>(cycle) {render(t)}</li>" for t in trials if t.get("id") not in seen]
    return f'<ul class="tree">{"".join(items)}</ul>'


def best_speedup_series(trials: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(trial number, best speedup so far) over trials that were ok and have a speedup."""
    series, best = [], None
    for i, t in enumerate(trials, start=1):
        s = t.get("speedup")
        if t.get("status") == "ok" and isinstance(s, (int, float)):
            best = s if best is None else max(best, s)
        if best is not None:
            series.append((float(i), float(best)))
    return series


def _search_section(index: int, search: SearchLog) -> str:
    start, end = search.start or {}, search.end or {}
    title = (
        f"{_fmt(start.get('pattern'))} ({_fmt(start.get('kind'))}) {_fmt(start.get('subgraph'))}"
    )
    rows = [
        ("speed-of-light ms", _fmt(start.get("sol_ms"))),
        ("baselines ms", html.escape(json.dumps(start.get("baselines"), sort_keys=True))),
        ("budget", html.escape(json.dumps(start.get("budget"), sort_keys=True))),
        ("started", _fmt(start.get("time"))),
        ("fixed costs s", _seconds(start.get("fixed_s"))),
    ]
    if end:
        rows += [
            ("winner", _fmt(end.get("winner"))),
            ("best ms", _fmt(end.get("best_ms"))),
            ("speedup vs inductor", _fmt(end.get("speedup_vs_inductor"), ".3g")),
            ("trials", _fmt(end.get("trials"))),
            ("trials saved by SOL", _fmt(end.get("trials_saved_by_sol"))),
            (
                "reason",
                _fmt(end.get("reason")) + (f": {_fmt(end.get('why'))}" if end.get("why") else ""),
            ),
            ("search s, trials/s", f"{_fmt(end.get('search_s'))}, {_fmt(end.get('trials_per_s'))}"),
            ("seconds by phase, all trials", _seconds(end.get("phase_s"))),
        ]
    else:
        rows.append(("end", "no end event (search still running or interrupted)"))
    table = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    series = best_speedup_series(search.trials)
    dots = [
        (float(i), float(t["speedup"]))
        for i, t in enumerate(search.trials, start=1)
        if t.get("status") == "ok" and isinstance(t.get("speedup"), (int, float))
    ]
    chart = line_chart(
        series, dots, title="best speedup over trials", x_label="trial",
        y_label="speedup (x)", reference_y=1.0,
    )  # fmt: skip
    return (
        f'<section id="search-{index}"><h2>{index + 1}. {title}</h2><table>{table}</table>'
        f"<h3>Best speedup over trials</h3>{chart}"
        f"<h3>Search tree ({len(search.trials)} trials)</h3>{_tree(search.trials)}</section>"
    )


STYLE = """
body{font-family:sans-serif;margin:2em;max-width:1100px}
table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:2px 8px;text-align:left}
ul.tree ul{border-left:1px dashed #bbb;margin-left:.4em}.cand{color:#555;font-size:85%}
.findings{font-size:90%}.tools{font-size:80%;color:#666}.sev-high{color:#b00}.sev-medium{color:#b60}
.status-ok{color:#070}.status-wrong,.status-crashed,.status-compile_error{color:#b00}
"""


def render_html(parsed: ParsedLog, title: str) -> str:
    sections = "".join(_search_section(i, s) for i, s in enumerate(parsed.searches))
    skipped = ""
    if parsed.skipped:
        items = "".join(f"<li>{html.escape(s)}</li>" for s in parsed.skipped)
        skipped = f"<h2>Skipped lines</h2><ul>{items}</ul>"
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>"
        f"<h1>kernelpro search report: {html.escape(title)}</h1>{sections}{skipped}</body></html>"
    )


def write_report(log_path: str | Path, out_path: str | Path) -> str:
    """Render `log_path` to `out_path`; returns a one-line summary."""
    path = Path(log_path)
    try:
        text = read_text_bounded(path, MAX_LOG_BYTES, "search log")
    except OSError as e:
        raise ReportError(f"cannot read search log {path}: {e.strerror}") from None
    except LimitExceeded as e:
        raise ReportError(str(e)) from None
    parsed = parse_log(text)
    if not parsed.searches:
        raise ReportError(
            f"{path} holds no search events (expected JSON lines with "
            '"event": "start" | "trial" | "end")'
        )
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    Path(out_path).write_text(render_html(parsed, path.name))
    trials = sum(len(s.trials) for s in parsed.searches)
    note = f", {len(parsed.skipped)} lines skipped" if parsed.skipped else ""
    return f"{len(parsed.searches)} searches, {trials} trials{note}"
