"""`kernelpro bench`: time workloads under every mode, or merge earlier results.

Owns: its arguments (`add_cli`), turning them into a bench run (`run_bench`) or a merge
(`run_merge`), and what they print and write.
Must not: hold benchmarking logic (bench/: runner, workloads, merge, tables, plots do that).

    kernelpro bench --size full --device cuda --json out/bench.json --markdown out/bench.md --plots out
    kernelpro bench --workload softmax --workload mlp --size tiny --device cpu --modes eager,kernelpro
    kernelpro bench --problems path/to/kernelbench/level1 --device cuda
    kernelpro bench --merge run1/bench.json --merge run2/workloads.jsonl --markdown all.md --plots out
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import torch

from ..bench import tables
from ..bench.modes import ALL_MODES, EXTRA_MODES, make_modes
from ..bench.results import OK, BenchReport
from ..bench.runner import RunConfig, new_report, run_workloads
from ..bench.workloads import DTYPES, WORKLOADS, workload_builders


def add_cli(subparsers: Any) -> None:
    """Add `bench` to the `kernelpro` command's subparsers."""
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
        help=f"comma-separated modes (eager always runs); default {','.join(ALL_MODES)}; also "
        f"{', '.join(EXTRA_MODES)} (CUDA graphs, kernelpro's measured against Inductor's)",
    )  # fmt: skip
    p.add_argument("--search", action="store_true",
                   help='kernelpro searches on cache misses (options {"search": "on-miss"})')  # fmt: skip
    p.add_argument("--kernelpro-fallback", choices=("inductor", "eager"),
                   help="what kernelpro runs where it has no kernel (default: its own default)")  # fmt: skip
    p.add_argument("--cpu-reps", type=int, default=10, help="timed runs per mode on the CPU")
    p.add_argument(
        "--rounds", type=int, default=5,
        help="interleaved timing rounds (each mode's time is the median of its rounds); more "
        "for host-bound steps, whose rounds spread (the table lists them)",
    )  # fmt: skip
    p.add_argument("--list", action="store_true", help="list the built-in workloads and exit")
    p.add_argument(
        "--merge", action="append", metavar="FILE",
        help="run nothing: merge earlier results (bench.json, or the .jsonl of finished "
        "workloads a cut GPU run leaves) into one table and plots; a workload in several files "
        "is taken whole from the last (repeatable, in order)",
    )  # fmt: skip
    p.add_argument(
        "--merge-meta", action="append", metavar="NAME=KIND,DTYPE", default=[],
        help="with --merge: kind and dtype of a workload whose results lack them",
    )  # fmt: skip
    p.add_argument("--roofs", metavar="FILE",
                   help="with --merge: measured ceilings (JSON) for the roofline chart")  # fmt: skip
    p.set_defaults(func=run_bench)


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
    from ..bench.sol import device_roofs, device_sol_hooks

    sol_fn, subgraph_fn = device_sol_hooks(device)  # % of SOL and the roofline chart (GPU)
    if args.rounds < 1:
        raise SystemExit(f"kernelpro bench: --rounds {args.rounds}: need at least one round")
    config = RunConfig(
        modes=modes,
        cpu_reps=args.cpu_reps,
        rounds=args.rounds,
        sol_fn=sol_fn,
        subgraph_fn=subgraph_fn,
    )
    try:
        builders = workload_builders(args.workload or [], args.problems, device, dtype, size)
    except ValueError as e:  # an unknown name, or a bad problems directory
        raise SystemExit(f"kernelpro bench: {e}") from None
    report = new_report(device, size, modes)
    report.workloads = run_workloads(builders, config)
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
        from ..bench.plots import write_plots

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
    from ..bench.merge import MergeError, merge_reports, read_roofs

    try:
        roofs = read_roofs(args.roofs) if args.roofs else None
        report = merge_reports(args.merge, _merge_meta(args.merge_meta), roofs)
    except MergeError as e:
        print(f"kernelpro bench: {e}", file=sys.stderr)
        return 2
    write_outputs(report, args)
    return 0
