"""The `kernelpro bench` and `kernelpro report` subcommands.

Owns: their arguments (`add_cli`), turning arguments into a bench run (`run_bench`) or an
HTML page (`run_report`), and what they print.
Must not: hold benchmarking logic (runner, tables, plots, report do that).

    kernelpro bench --size full --device cuda --json out/bench.json --markdown out/bench.md --plots out
    kernelpro bench --workload softmax --workload mlp --size tiny --device cpu --modes eager,kernelpro
    kernelpro bench --problems path/to/kernelbench/level1 --device cuda
    kernelpro bench --merge run1/bench.json --merge run2/partial.jsonl --markdown all.md --plots out
    kernelpro report search.jsonl --out search.html
"""

from __future__ import annotations

import argparse
import functools
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from . import tables
from .modes import ALL_MODES, Mode, make_modes
from .problems import PROBLEM_PREFIX, ProblemError, load_problem, problem_files
from .results import OK, BenchReport
from .runner import RunConfig, run_workloads
from .workload import Workload
from .workloads import WORKLOADS

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def add_cli(subparsers: Any) -> None:
    """Add `bench` and `report` to the `kernelpro` command's subparsers."""
    p = subparsers.add_parser(
        "bench",
        help="time workloads under eager, Inductor, Inductor max-autotune and kernelpro",
        description="Runs each workload under every mode in one process, checks outputs (and "
        "gradients) against eager and prints a table. Exit status 1 if a mode failed or "
        "differs from eager.",
    )
    p.add_argument(
        "--workload", action="append", metavar="NAME",
        help=f"a built-in workload (repeatable; 'all' for all): {', '.join(WORKLOADS)}; "
        "default all, or none when --problems is given",
    )  # fmt: skip
    p.add_argument("--problems", metavar="DIR", help="a directory of KernelBench-format files")
    p.add_argument("--json", metavar="OUT", help="write the results as JSON")
    p.add_argument("--markdown", metavar="OUT", help="write the results as a markdown table")
    p.add_argument("--plots", metavar="DIR", help="write PNG charts (needs matplotlib)")
    p.add_argument("--size", choices=("tiny", "full"), help="default: full on cuda, tiny on cpu")
    p.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when present")
    p.add_argument("--dtype", choices=("auto", *DTYPES), default="auto",
                   help="auto: each workload's default (bf16 GPT block/MoE/attention on cuda)")  # fmt: skip
    p.add_argument(
        "--modes", default=",".join(ALL_MODES),
        help=f"comma-separated modes (eager always runs); default {','.join(ALL_MODES)}",
    )  # fmt: skip
    p.add_argument("--search", action="store_true",
                   help='kernelpro searches on cache misses (options {"search": "on-miss"})')  # fmt: skip
    p.add_argument("--kernelpro-fallback", choices=("inductor", "eager"),
                   help="what kernelpro runs where it has no kernel (default: its own default)")  # fmt: skip
    p.add_argument("--cpu-reps", type=int, default=10, help="timed runs per mode on the CPU")
    p.add_argument("--list", action="store_true", help="list the built-in workloads and exit")
    p.add_argument(
        "--merge", action="append", metavar="FILE",
        help="run nothing: merge earlier results (bench.json, or the partial.jsonl a cut GPU run "
        "leaves) into one table and plots; a workload in several files is taken whole from the "
        "last (repeatable, in order)",
    )  # fmt: skip
    p.add_argument(
        "--merge-meta", action="append", metavar="NAME=KIND,DTYPE", default=[],
        help="with --merge: kind and dtype of a workload whose partial rows lack them",
    )  # fmt: skip
    p.add_argument("--roofs", metavar="FILE",
                   help="with --merge: measured ceilings (JSON) for the roofline chart")  # fmt: skip
    p.set_defaults(func=run_bench)

    r = subparsers.add_parser("report", help="render a search log (JSON lines) as an HTML page")
    r.add_argument("log", metavar="LOG", help="search log written by kernelpro's search")
    r.add_argument("--out", metavar="FILE.html", help="default: LOG with .html")
    r.set_defaults(func=run_report)


def _versions() -> dict[str, str]:
    from .. import __version__

    versions = {"torch": torch.__version__, "python": platform.python_version()}
    versions["kernelpro"] = __version__
    try:
        import triton

        versions["triton"] = triton.__version__
    except ImportError:
        pass
    return versions


def _builders(
    args: argparse.Namespace, device: torch.device, dtype: torch.dtype | None, size: str
) -> list[tuple[str, Callable[[], Workload]]]:
    names: list[str] = list(args.workload or ([] if args.problems else ["all"]))
    if "all" in names:
        names = list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise SystemExit(
            f"kernelpro bench: unknown workload(s) {unknown}; known: {', '.join(WORKLOADS)}"
        )
    builders: list[tuple[str, Callable[[], Workload]]] = [
        (n, functools.partial(WORKLOADS[n], device, dtype, size)) for n in dict.fromkeys(names)
    ]
    if args.problems:
        try:
            files = problem_files(args.problems)
        except ProblemError as e:
            raise SystemExit(f"kernelpro bench: {e}") from None
        builders += [
            (PROBLEM_PREFIX + f.stem, functools.partial(load_problem, f, device, dtype))
            for f in files
        ]
    return builders


def new_report(device: torch.device, size: str, modes: list[Mode]) -> BenchReport:
    """An empty report for a run on `device` (workloads are appended as they finish)."""
    return BenchReport(
        device=str(device),
        device_name=torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
        versions=_versions(),
        size=size,
        modes=[m.name for m in modes],
        mode_descriptions={m.name: m.describe() for m in modes},
    )


def _device(requested: str | None) -> torch.device:
    if requested == "cuda" and not torch.cuda.is_available():
        raise SystemExit("kernelpro bench: --device cuda, but torch sees no CUDA GPU here")
    return torch.device(requested or ("cuda" if torch.cuda.is_available() else "cpu"))


def run_bench(args: argparse.Namespace) -> int:
    if args.list:
        for name, factory in WORKLOADS.items():
            doc = (factory.__doc__ or "").strip()
            print(f"{name:16} {doc.splitlines()[0] if doc else ''}")
        return 0
    if args.merge:
        return run_merge(args)
    device = _device(args.device)
    size = args.size or ("full" if device.type == "cuda" else "tiny")
    dtype = None if args.dtype == "auto" else DTYPES[args.dtype]
    kp_options: dict[str, Any] = {}
    if args.search:
        kp_options["search"] = "on-miss"
    if args.kernelpro_fallback:
        kp_options["fallback"] = args.kernelpro_fallback
    try:
        modes = make_modes([m.strip() for m in args.modes.split(",") if m.strip()], kp_options)
    except ValueError as e:
        raise SystemExit(f"kernelpro bench: {e}") from None
    from .sol import device_roofs, device_sol_hooks

    sol_fn, subgraph_fn = device_sol_hooks(device)  # % of SOL and the roofline chart (GPU)
    config = RunConfig(modes=modes, cpu_reps=args.cpu_reps, sol_fn=sol_fn, subgraph_fn=subgraph_fn)
    report = new_report(device, size, modes)
    report.workloads = run_workloads(_builders(args, device, dtype, size), config)
    report.roofs = device_roofs(device)
    write_outputs(report, args)
    all_ok = all(m.status == OK for w in report.workloads for m in w.modes)
    return 0 if all_ok else 1


def write_outputs(report: BenchReport, args: argparse.Namespace) -> None:
    """Print the table; write the JSON, markdown and plots the arguments ask for."""
    print(tables.format_console(report))
    if args.json:
        tables.write_json(report, args.json)
        print(f"JSON written to {args.json}")
    if args.markdown:
        tables.write_markdown(report, args.markdown)
        print(f"markdown written to {args.markdown}")
    if args.plots:
        from .plots import write_plots

        _, message = write_plots(report, args.plots)
        print(message)


def _merge_meta(items: list[str]) -> dict[str, dict[str, str]]:
    meta = {}
    for item in items:
        name, _, rest = item.partition("=")
        kind, _, dtype = rest.partition(",")
        if not (name and kind and dtype):
            raise SystemExit(f"kernelpro bench: --merge-meta wants NAME=KIND,DTYPE, got {item!r}")
        meta[name] = {"kind": kind, "dtype": dtype}
    return meta


def run_merge(args: argparse.Namespace) -> int:
    from .merge import MergeError, merge_reports, read_roofs

    try:
        roofs = read_roofs(args.roofs) if args.roofs else None
        report = merge_reports(args.merge, _merge_meta(args.merge_meta), roofs)
    except MergeError as e:
        print(f"kernelpro bench: {e}", file=sys.stderr)
        return 2
    write_outputs(report, args)
    return 0


def run_report(args: argparse.Namespace) -> int:
    from .report import ReportError, write_report

    out = Path(args.out) if args.out else Path(args.log).with_suffix(".html")
    try:
        summary = write_report(args.log, out)
    except ReportError as e:
        print(f"kernelpro report: {e}", file=sys.stderr)
        return 2
    print(f"report written to {out}: {summary}")
    return 0
