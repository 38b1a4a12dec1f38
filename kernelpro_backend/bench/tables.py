"""A bench report as text: the console table, the markdown file and the JSON file.

Owns: formatting numbers, the row layout shared by the console and markdown tables (a J/step
column where joules per step were measured; the power limit under the title), the
geometric-mean summary, and writing the JSON/markdown files and the JSON-lines file of a run
in progress (`append_jsonl`: one line per finished workload, its final result).
Must not: run anything or change results.

What the tables claim: a kernelpro mode that ran its fallback's own code (no kernel installed,
no torch-level rewrite; results.py) gets no speedup cell and no geometric mean of its own, but
a line saying so; a speedup under 0.1 is printed to two significant digits, never as "0.00"
(a busy CPU's round of 0.0014x read "[0.00-3.70]"); rounds whose speedups spread more than
NOISY apart are listed as noise.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..runtime import timing
from .modes import EAGER, INDUCTOR, LIKE_FOR_LIKE
from .results import BenchReport, WorkloadResult

HEADER = (
    "workload", "kind", "dtype", "mode", "status", "median ms", "vs eager", "vs inductor",
    "steady ms", "% SOL", "step MiB", "compile s", "kernels",
)  # fmt: skip


# Rounds whose lowest and highest speedups lie further apart than this are noise, listed.
NOISY = 2.0

SAME_CODE = "same code"


def _num(value: float | None, fmt: str, suffix: str = "") -> str:
    return "-" if value is None else format(value, fmt) + suffix


def ratio(value: float | None, suffix: str = "x") -> str:
    """A speedup: two decimals, or two significant digits under 0.1 (never a "0.00")."""
    if value is None:
        return "-"
    return format(value, ".2f" if value >= 0.1 else ".2g") + suffix


def _speedup(w: WorkloadResult, mode: str, over: str) -> str:
    """The speedup cell: none for a mode that ran another mode's own code ("same code" in
    that mode's column)."""
    peer = w.same_code_as(mode)
    if peer is not None:
        return SAME_CODE if peer == over else "-"
    return ratio(w.speedup(mode, over))


def _vs_inductor(w: WorkloadResult, mode: str) -> str:
    """The speedup over Inductor and, after it, its lowest-highest over the paired rounds."""
    text = _speedup(w, mode, INDUCTOR)
    spread = _spread(w, mode)
    return text if spread is None else f"{text} [{ratio(spread[0], '')}-{ratio(spread[1], '')}]"


def _spread(w: WorkloadResult, mode: str) -> tuple[float, float] | None:
    if mode == INDUCTOR or w.same_code_as(mode) is not None:
        return None
    return w.speedup_range(mode, INDUCTOR)


ENERGY_COLUMN = "J/step"  # only in reports where some mode's joules per step were measured


def _has_energy(report: BenchReport) -> bool:
    return any(m.step_j is not None for w in report.workloads for m in w.modes)


def header(report: BenchReport) -> tuple[str, ...]:
    """HEADER, with ENERGY_COLUMN after `steady ms` when the report has joules per step."""
    if not _has_energy(report):
        return HEADER
    at = HEADER.index("steady ms") + 1
    return (*HEADER[:at], ENERGY_COLUMN, *HEADER[at:])


def power_line(report: BenchReport) -> str:
    """The GPU's power limit ("power-capped: ..." below its default), or "" if not read."""
    return str(report.power.get("note", ""))


def rows(report: BenchReport) -> list[tuple[str, ...]]:
    energy = _has_energy(report)
    out: list[tuple[str, ...]] = []
    for w in report.workloads:
        for m in w.modes:
            sol = w.sol_fraction(m.mode)
            out.append(
                (
                    w.workload,
                    w.kind,
                    w.dtype,
                    m.mode,
                    m.status,
                    _num(m.median_ms, ".4g"),
                    _speedup(w, m.mode, EAGER),
                    _vs_inductor(w, m.mode),
                    _num(m.steady_ms, ".4g"),
                    *((_num(m.step_j, ".4g"),) if energy else ()),
                    _num(None if sol is None else 100 * sol, ".1f", "%"),
                    _num(m.step_peak_mib, ".0f"),
                    _num(m.compile_s, ".1f"),
                    m.kernels or "-",
                )
            )
    return out


def summary_lines(report: BenchReport) -> list[str]:
    lines = []
    for mode in report.modes:
        same, peer = report.same_code(mode)
        if same and len(same) == len(report.workloads):
            lines.append(
                f"{mode}: no kernels installed and no torch-level rewrites: the same code as "
                f"{peer} in every workload, so no speedup of its own"
            )
            continue
        ge = report.geomean_speedup(mode, EAGER)
        gi = report.geomean_speedup(mode, INDUCTOR)
        line = f"{mode}: geomean {ratio(ge)} vs eager, {ratio(gi)} vs inductor"
        if same:
            line += f" ({len(same)} of {len(report.workloads)} ran {peer}'s own code: 1.00x)"
        lines.append(line)
    for w in report.workloads:  # e.g. kernelpro and Inductor both replaying CUDA graphs
        for mode, peer in LIKE_FOR_LIKE.items():
            x, spread = w.speedup(mode, peer), w.speedup_range(mode, peer)
            if x is None:
                continue
            if w.same_code_as(mode) == peer:
                lines.append(f"{w.workload}: {mode} ran {peer}'s own code (no kernels, rewrites)")
                continue
            text = ratio(x) + ("" if spread is None else f" [{ratio(spread[0], '')}-"
                                                        f"{ratio(spread[1], '')}]")  # fmt: skip
            lines.append(f"{w.workload}: {mode} {text} vs {peer} (like for like)")
    return lines


def same_code_lines(report: BenchReport) -> list[str]:
    """A line per mode that ran its fallback's own code somewhere: where, and what it ran."""
    lines = []
    for mode in report.modes:
        same, peer = report.same_code(mode)
        if same:
            lines.append(
                f"{mode} on {', '.join(same)}: no kernels installed, no torch-level rewrites: "
                f"the same code as {peer} (its time differs from {peer}'s by noise alone)"
            )
    return lines


def noisy_lines(report: BenchReport) -> list[str]:
    """Each mode whose per-round speedups over Inductor lie more than NOISY apart."""
    lines = []
    for w in report.workloads:
        for m in w.modes:
            spread = _spread(w, m.mode)
            if spread is not None and spread[0] > 0 and spread[1] / spread[0] > NOISY:
                lines.append(
                    f"{w.workload} / {m.mode}: rounds from {ratio(spread[0])} to "
                    f"{ratio(spread[1])} vs inductor"
                )
    return lines


def host_bound(report: BenchReport) -> list[str]:
    """A line per mode whose step waits on the host (`runtime.timing.host_bound`: its launches
    take most of it): its time is the host's, and a GPU-side gain shows only in part."""
    lines = []
    for w in report.workloads:
        for m in w.modes:
            if m.launch_ms is None or m.launched_step_ms is None:
                continue
            if timing.host_bound(m.launch_ms, m.launched_step_ms):
                own = m.mode != INDUCTOR and w.same_code_as(m.mode) is None
                steady = w.steady_speedup(m.mode, INDUCTOR) if own else None
                rate = "" if steady is None else f"; back to back {steady:.2f}x vs inductor"
                lines.append(
                    f"{w.workload} / {m.mode}: host-bound: launching a step takes "
                    f"{m.launch_ms:.2f} of its {m.launched_step_ms:.2f} ms{rate}"
                )
    return lines


def rewrite_lines(report: BenchReport) -> list[str]:
    """A line per kernelpro mode: the torch-level rewrites its graphs were compiled with."""
    return [
        f"{w.workload} / {m.mode}: {m.rewrites}"
        for w in report.workloads
        for m in w.modes
        if m.rewrites
    ]


# A kernelpro step this much slower than Inductor's is listed as a regret.
REGRET = 0.02


def _graph_line(graph: dict[str, Any]) -> str:
    verdict = graph.get("verdict") or {}
    line = f"{graph['graph']} graph, {graph['kernels']} kernel(s): in context "
    if verdict.get("with_ms") is not None:
        line += (
            f"{verdict.get('with_ms')} ms with them, {verdict.get('without_ms')} without "
            f"({graph['in_context']}, faster in {verdict.get('wins')}/{verdict.get('rounds')})"
        )
    else:
        line += graph.get("in_context") or "not judged"
    notes = [_kernel_note(kid, ms, graph) for kid, ms in graph.get("isolated", {}).items()]
    return line + (f"; alone (kernel vs fallback ms): {', '.join(notes)}" if notes else "")


def _kernel_note(kid: str, ms: list[float], graph: dict[str, Any]) -> str:
    """One kernel's isolated figures and what the graph made of it: "0.5 vs 0.8 (k1) dropped,
    +3.0% graph time with it"."""
    verdict = graph.get("verdict") or {}
    every = graph.get("in_context") == "dropped"
    tie = " near tie" if kid in graph.get("tentative", ()) else ""
    note = f"{ms[0]:.4g} vs {ms[1]:.4g} ({kid.rpartition('/')[2]}{tie})"
    if not graph.get("in_context") or graph.get("in_context") == "judging":
        return note
    dropped = every or kid in graph.get("dropped", ())
    effect = (verdict.get("effects") or {}).get(kid)
    effect_text = "" if effect is None else f", {effect:+.1%} graph time with it"
    return f"{note} {'dropped' if dropped else 'kept'}{effect_text}"


def regret_lines(report: BenchReport) -> list[str]:
    """Every workload where a kernelpro mode is slower than Inductor beyond REGRET, or where
    an in-context verdict dropped kernels: each graph with kernels, its in-context figures and
    each kernel's isolated ones with its own fate (what won alone, and what the whole graph
    made of it)."""
    out = []
    for w in report.workloads:
        inductor = next((m.median_ms for m in w.modes if m.mode == INDUCTOR), None)
        for m in w.modes:
            if not m.graphs or m.median_ms is None:
                continue
            slower = inductor is not None and m.median_ms > inductor * (1 + REGRET)
            lost = any(g.get("in_context") in ("dropped", "partial") for g in m.graphs)
            if not slower and not lost:
                continue
            ratio = f"{inductor / m.median_ms:.2f}x Inductor" if inductor else "no Inductor"
            out.append(f"{w.workload} / {m.mode}: {ratio}{' (slower)' if slower else ''}")
            out += ["  " + _graph_line(g) for g in m.graphs]
    return out


def problems(report: BenchReport) -> list[str]:
    """One line per mode that failed or differs from eager, with what went wrong."""
    return [
        f"{w.workload} / {m.mode}: {m.status}: {m.message}"
        for w in report.workloads
        for m in w.modes
        if m.status != "ok"
    ]


def format_console(report: BenchReport) -> str:
    head = header(report)
    table = [head, *rows(report)]
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in table
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    title = f"kernelpro bench on {report.device_name} ({report.device}), size {report.size}"
    power = power_line(report)
    out = [title, *([power] if power else []), "", *lines, "", *summary_lines(report)]
    same = same_code_lines(report)
    if same:
        out += ["", "no speedup claimed:", *("  " + line for line in same)]
    noisy = noisy_lines(report)
    if noisy:
        out += [
            "",
            f"noisy: rounds more than {NOISY:g}x apart (a busy machine; --rounds N and "
            "--cpu-reps N time more):",
        ]
        out += ["  " + line for line in noisy]
    waiting = host_bound(report)
    if waiting:
        out += [
            "",
            "host-bound (GPU-side gains show in part; the CUDA-graph modes show them; their "
            "rounds spread: --rounds N for more):",
        ]
        out += ["  " + line for line in waiting]
    made = rewrite_lines(report)
    if made:
        out += ["", "torch-level rewrites:", *("  " + line for line in made)]
    regrets = regret_lines(report)
    if regrets:
        out += ["", "in context (slower than Inductor, or kernels dropped):"]
        out += ["  " + line for line in regrets]
    issues = problems(report)
    if issues:
        out += ["", "not ok:", *("  " + line for line in issues)]
    return "\n".join(out)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def format_markdown(report: BenchReport) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in sorted(report.versions.items()))
    out = [
        "# kernelpro bench",
        "",
        f"Device: {report.device_name} ({report.device}); size: {report.size}; {versions}."
        + (f" {power_line(report)}." if power_line(report) else ""),
        "Times are medians (GPU: `triton.testing.do_bench`; CPU: `time.perf_counter`); speedups "
        "count only modes whose outputs (and gradients) match eager; `vs inductor [a-b]`: "
        "the lowest and highest speedup over the interleaved rounds, each of which times every "
        "mode back to back (b under 1: slower in every round). `steady ms` (training "
        "steps on the GPU): wall time per step of steps run back to back, the rate a training "
        "loop runs at — the host's where it issues a step slower than the GPU runs it."
        + (
            f" `{ENERGY_COLUMN}`: joules per step (NVML's energy counter, steps run back to "
            "back, idle draw included)."
            if _has_energy(report)
            else ""
        ),
        "",
        "| " + " | ".join(header(report)) + " |",
        "|" + "|".join("---" for _ in header(report)) + "|",
    ]
    out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows(report)]
    out += ["", "## Geometric means", ""] + [f"- {line}" for line in summary_lines(report)]
    out += [f"- {line}" for line in same_code_lines(report)]
    noisy = noisy_lines(report)
    if noisy:
        out += ["", f"## Noisy rounds (more than {NOISY:g}x apart)", ""]
        out += [f"- {line}" for line in noisy]
    out += ["", "## Modes", ""]
    out += [f"- `{name}`: {desc}" for name, desc in report.mode_descriptions.items()]
    made = rewrite_lines(report)
    if made:
        out += ["", "## Torch-level rewrites", ""] + [f"- {_md_cell(line)}" for line in made]
    regrets = regret_lines(report)
    if regrets:
        out += ["", "in context (slower than Inductor, or kernels dropped):"]
        out += ["  " + line for line in regrets]
    issues = problems(report)
    if issues:
        out += ["", "## Not ok", ""] + [f"- {_md_cell(line)}" for line in issues]
    return "\n".join(out) + "\n"


def _strict_json(value: Any) -> Any:
    """Infinite/NaN errors (a shape mismatch, a NaN output) as strings: strict JSON has none."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _strict_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strict_json(v) for v in value]
    return value


def write_json(report: BenchReport, path: str | Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_strict_json(report.to_dict()), indent=2, allow_nan=False)
    Path(path).write_text(text + "\n")


def append_jsonl(workload: WorkloadResult, path: str | Path) -> None:
    """Append one finished workload's final result as one JSON line (`kernelpro bench --merge`
    reads such a file; a run killed mid-way leaves the workloads it finished)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(_strict_json(workload.to_dict()), allow_nan=False)
    with Path(path).open("a") as f:
        f.write(line + "\n")


def write_markdown(report: BenchReport, path: str | Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(format_markdown(report))
