"""One report from the results of several bench runs (one table, one set of plots).

Owns: reading a run's results - the `bench.json` of `kernelpro bench --json` or
scripts/gpu_bench.py, or a JSON-lines file of finished workloads (`tables.append_jsonl`: one
final `WorkloadResult` a line, what a run cut by its time limit leaves) - and `merge_reports`: one row per workload, each row from a single run.
Timings of different runs are never mixed within a workload (a speedup exists only when
measured side by side in one run): a workload present in several inputs is taken whole from the
last one that has it. Its speed of light and roofline points, which depend on the workload and
the device but not on the run, are kept from an earlier run of the same size and dtype when the
last one has none (a run cut before it computed them).
Must not: run or time anything.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from .modes import ALL_MODES
from .results import BenchReport, WorkloadResult

log = logging.getLogger("kernelpro.bench")


class MergeError(ValueError):
    """An input that is not a bench result, or inputs that cannot go in one table."""


def workloads_from_jsonl(text: str, source: str = "jsonl") -> list[WorkloadResult]:
    """The workloads of a JSON-lines file, one finished workload a line."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            found.append(WorkloadResult.from_dict(json.loads(line)))
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise MergeError(
                f"{source} line {n}: not a workload result ({type(e).__name__}: {e})"
            ) from None
    return found


def _keep_sol(old: WorkloadResult, new: WorkloadResult) -> None:
    """Give `new` the SOL and roofline points of `old` (same workload, size and dtype) when it
    has none of its own."""
    same = (old.size, old.dtype) == (new.size, new.dtype) or "?" in (new.size, new.dtype)
    if not same:
        return
    if new.sol_ms is None and old.sol_ms is not None:
        new.sol_ms = old.sol_ms
        log.info("merge: %s keeps the SOL of an earlier run", new.workload)
    if not new.subgraphs and old.subgraphs:
        new.subgraphs = old.subgraphs


def read_results(path: str | Path) -> tuple[BenchReport | None, list[WorkloadResult]]:
    """(the report, its workloads) of a bench.json; (None, its workloads) of a .jsonl."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise MergeError(f"cannot read {path}: {e}") from None
    if path.suffix == ".jsonl":
        return None, workloads_from_jsonl(text, str(path))
    try:
        report = BenchReport.from_dict(json.loads(text))
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise MergeError(f"{path}: not a bench report ({type(e).__name__}: {e})") from None
    return report, report.workloads


def merge_reports(
    paths: list[str | Path],
    meta: dict[str, dict[str, str]] | None = None,
    roofs: dict[str, float] | None = None,
) -> BenchReport:
    """Merge bench results (in order; a later input's workload replaces an earlier one's).
    `meta` fills in what older results did not record ({"lm_head": {"kind": "training",
    "dtype": "bfloat16"}}); `roofs` replaces the reports' roofs (older runs did not store them).
    The inputs must come from one device."""
    if not paths:
        raise MergeError("nothing to merge")
    reports: list[BenchReport] = []
    merged: dict[str, WorkloadResult] = {}
    described: dict[str, dict[str, str]] = {}  # workload -> mode -> how its run ran that mode
    for path in paths:
        report, workloads = read_results(path)
        if report is not None:
            reports.append(report)
        for w in workloads:
            described[w.workload] = {
                m.mode: _description(report, m.mode, rows=str(path)) for m in w.modes
            }
            if w.workload in merged:
                log.info("merge: %s taken from %s (replaces an earlier run's)", w.workload, path)
                _keep_sol(merged[w.workload], w)
            merged[w.workload] = w  # dict keeps the first position, takes the last value
    if not reports:
        raise MergeError("at least one input must be a bench.json (it gives the device)")
    devices = {r.device_name for r in reports}
    if len(devices) > 1:
        raise MergeError(f"results of different devices cannot share a table: {sorted(devices)}")
    for name, fields in (meta or {}).items():
        if name not in merged:
            raise MergeError(f"--merge-meta names {name}, which no input has")
        for key, value in fields.items():
            if key not in ("kind", "dtype", "size", "source"):
                raise MergeError(f"--merge-meta: unknown field {key!r} for {name}")
            setattr(merged[name], key, value)
    unknown = [w.workload for w in merged.values() if "?" in (w.kind, w.dtype)]
    if unknown:
        log.warning("merge: kind or dtype unknown for %s (give --merge-meta)", unknown)
    modes = {m.mode for w in merged.values() for m in w.modes}
    versions: dict[str, str] = {}
    for r in reports:
        versions.update(r.versions)
    last = reports[-1]
    return BenchReport(
        device=last.device,
        device_name=last.device_name,
        versions=versions,
        size="/".join(sorted({r.size for r in reports})),
        modes=[m for m in ALL_MODES if m in modes] + sorted(modes - set(ALL_MODES)),
        mode_descriptions=_descriptions(described),
        workloads=list(merged.values()),
        roofs=dict(roofs) if roofs else next((dict(r.roofs) for r in reports if r.roofs), {}),
        power=dict(last.power),
    )


def _description(report: BenchReport | None, mode: str, rows: str) -> str:
    if report is not None:
        return report.mode_descriptions.get(mode, "not recorded")
    return f"not recorded in {Path(rows).name}"


def _descriptions(described: dict[str, dict[str, str]]) -> dict[str, str]:
    """Each mode's description; where runs ran a mode differently (kernelpro with and without
    search), each variant with the workloads it applies to."""
    variants: dict[str, dict[str, list[str]]] = {}
    for workload, by_mode in described.items():
        for mode, text in by_mode.items():
            variants.setdefault(mode, {}).setdefault(text, []).append(workload)
    out = {}
    for mode in [m for m in ALL_MODES if m in variants] + sorted(set(variants) - set(ALL_MODES)):
        texts = variants[mode]
        if len(texts) == 1:
            out[mode] = next(iter(texts))
        else:
            out[mode] = "; ".join(f"{t} for {', '.join(ws)}" for t, ws in texts.items())
    return out


def read_roofs(path: str | Path) -> dict[str, float]:
    """Roofs from a ceilings JSON (the file `Ceilings` caches, or any JSON holding it under a
    "ceilings" key, such as an evaluate run's results)."""
    from .sol import roofs_of

    try:
        data = json.loads(Path(path).read_text())
        data = data.get("ceilings", data)
        return roofs_of(data)
    except (OSError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        raise MergeError(f"{path}: no measured ceilings in it ({type(e).__name__}: {e})") from None
