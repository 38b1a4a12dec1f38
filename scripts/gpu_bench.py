"""GPU run of `kernelpro bench` at full size, kept to a time budget (the lead runs this on the
H100: torch 2.11, triton 3.6).

    OUT=/tmp/out python scripts/gpu_bench.py                     # ops first, then models
    OUT=/tmp/out python scripts/gpu_bench.py --budget-s 500 --workload gpt_block --workload moe

Each workload runs under eager, Inductor, Inductor max-autotune-no-cudagraphs and kernelpro in
this one process, checked against eager. No new workload starts once --budget-s has passed
(one that is running finishes); the ones left are listed with the command that runs them.
Writes $OUT/bench.json, bench.md, bench.txt and PNG speedup charts (matplotlib is in the GPU
image); prints the table last. Modes run in the order --modes gives (eager first): put the
slowest compile last. $OUT/workloads.jsonl gets a line as each workload finishes, its final
result (`kernelpro bench --merge` turns those of a cut run into a table).
--precompile-limit-s compiles max-autotune (or the --precompile modes) of each workload in a
child process first (bench/precompile.py): a compile that outlives the limit costs that mode
of that workload only, where --mode-limit-s ends the run.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import faulthandler
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from kernelpro_backend.bench import tables  # noqa: E402
from kernelpro_backend.bench.modes import ALL_MODES, MAX_AUTOTUNE, make_modes  # noqa: E402
from kernelpro_backend.bench.plots import write_plots  # noqa: E402
from kernelpro_backend.bench.precompile import precompile  # noqa: E402
from kernelpro_backend.bench.problems import load_problem, problem_files  # noqa: E402
from kernelpro_backend.bench.results import (  # noqa: E402
    FAILED,
    BenchReport,
    ModeResult,
    WorkloadResult,
    per_problem,
)
from kernelpro_backend.bench.runner import RunConfig, new_report, run_workloads  # noqa: E402
from kernelpro_backend.bench.sol import device_roofs, device_sol_hooks  # noqa: E402
from kernelpro_backend.bench.workload import Workload  # noqa: E402
from kernelpro_backend.bench.workloads import (  # noqa: E402
    DTYPES,
    OP_WORKLOADS,
    TRAINING_WORKLOADS,
    WORKLOADS,
)

DEFAULT_ORDER = [*OP_WORKLOADS, *TRAINING_WORKLOADS]
SHUTDOWN_LIMIT_S = 60


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", action="append", choices=list(WORKLOADS))
    parser.add_argument(
        "--problems",
        help="run a directory of KernelBench files (with --workload: after those workloads)",
    )
    parser.add_argument("--modes", default=",".join(ALL_MODES))
    parser.add_argument("--search", action="store_true", help='kernelpro {"search": "on-miss"}')
    parser.add_argument("--budget-s", type=float, default=200.0)
    parser.add_argument(
        "--mode-limit-s", type=float,
        help="a mode still compiling after this many seconds is recorded as not finished and "
        "the run ends with the table so far (the compile cannot be interrupted in-process)",
    )  # fmt: skip
    parser.add_argument(
        "--precompile-limit-s", type=float,
        help="compile the --precompile modes of each workload in a child process first, killed "
        "after this many seconds; a mode that does not finish is left out of that workload only",
    )  # fmt: skip
    parser.add_argument(
        "--precompile", default=MAX_AUTOTUNE, type=lambda text: text.split(","),
        help=f"modes compiled in a child first (default {MAX_AUTOTUNE})",
    )  # fmt: skip
    parser.add_argument(
        "--rounds", type=int, default=5, help="interleaved timing rounds (more: host-bound steps)"
    )
    parser.add_argument("--device", default="cuda", help="cpu: smoke-test the script itself")
    parser.add_argument("--size", default="full", choices=("tiny", "full"))
    parser.add_argument(
        "--dtype", default="auto", choices=("auto", *DTYPES),
        help="auto: each workload's default",
    )  # fmt: skip
    args = parser.parse_args()
    if args.rounds < 1:  # as `kernelpro bench` says it
        parser.error(f"--rounds {args.rounds}: need at least one round")
    return args


def main() -> int:
    args = parse_args()
    dtype = None if args.dtype == "auto" else DTYPES[args.dtype]
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_bench: torch sees no CUDA GPU; run this on the GPU machine", file=sys.stderr)
        return 2
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    modes = make_modes(
        [m.strip() for m in args.modes.split(",") if m.strip()],
        {"search": "on-miss"} if args.search else None,
    )
    finished = out / "workloads.jsonl"  # one line per finished workload: what a kill leaves
    report = new_report(device, args.size, modes)
    report.roofs = device_roofs(device)  # the measured ceilings, for the roofline chart

    def give_up(workload: Workload, mode: str) -> None:
        """The watchdog fired: record the mode that did not finish compiling, and stop."""
        failed = ModeResult(
            mode, FAILED, message=f"still compiling after {args.mode_limit_s:.0f} s: stopped"
        )
        cut = WorkloadResult(workload=workload.name, **workload.record(), modes=[failed])
        report.workloads.append(cut)
        tables.append_jsonl(cut, finished)
        finish(report, out, [], args.budget_s)
        print(f"[gpu_bench] {workload.name}: {mode} {failed.message}", file=sys.stderr, flush=True)
        os._exit(0)

    watchdog = Watchdog(args.mode_limit_s, give_up)
    sol_fn, subgraph_fn = device_sol_hooks(device)  # % of SOL and the roofline chart
    config = RunConfig(
        modes=modes,
        rounds=args.rounds,
        on_workload=lambda result: tables.append_jsonl(result, finished),
        watch_compile=watchdog.watching,
        sol_fn=sol_fn,
        subgraph_fn=subgraph_fn,
    )
    # the built-in workloads by default, none when --problems is given (as `kernelpro bench`)
    names = args.workload or ([] if args.problems else DEFAULT_ORDER)
    extra = problem_files(args.problems) if args.problems else []
    start = time.perf_counter()
    left: list[str] = []
    for name in names:
        if time.perf_counter() - start > args.budget_s:
            left.append(name)
            continue
        report.workloads += run_workloads(
            [(name, lambda n=name: WORKLOADS[n](device, dtype, args.size))],
            precompiled(config, name, args, finished),
        )
        print(f"[gpu_bench] {name} done at {time.perf_counter() - start:.0f}s", file=sys.stderr)
        tables.write_json(report, out / "bench.json")  # after each workload: a kill loses one
    for path in extra:
        if time.perf_counter() - start > args.budget_s:
            left.append(f"kb:{path.stem}")
            continue
        report.workloads += run_workloads(
            [(f"kb:{path.stem}", lambda p=path: load_problem(p, device))], config
        )
        print(
            f"[gpu_bench] kb:{path.stem} done at {time.perf_counter() - start:.0f}s",
            file=sys.stderr,
        )
        tables.write_json(report, out / "bench.json")
    (out / "problems.json").write_text(json.dumps(per_problem(report), indent=1) + "\n")
    finish(report, out, left, args.budget_s)
    print(f"[gpu_bench] total {time.perf_counter() - start:.0f}s", file=sys.stderr)
    return 0


def precompiled(
    config: RunConfig, name: str, args: argparse.Namespace, finished: Path
) -> RunConfig:
    """`config` for workload `name` after its --precompile modes compiled in a child process
    (bench/precompile.py: Inductor's caches filled, so the compile here is quick; the child's
    seconds are added to the mode's compile time); a mode whose child ran out of time or
    failed is left out of this workload only, and recorded."""
    child_s: dict[str, float] = {}
    left_out: list[ModeResult] = []
    for mode in config.modes:
        if mode.name in args.precompile and args.precompile_limit_s:
            seconds, why = precompile(
                name, mode.name, args.size, args.dtype, args.precompile_limit_s, args.device
            )
            child_s[mode.name] = seconds
            if why is not None:
                print(f"[gpu_bench] {name}: {mode.name} {why}", file=sys.stderr, flush=True)
                left_out.append(ModeResult(mode.name, FAILED, message=why))
    if not child_s:
        return config

    def record(result: WorkloadResult) -> None:
        for mode in result.modes:
            if mode.mode in child_s and mode.compile_s is not None:
                mode.compile_s += child_s[mode.mode]
        result.modes += left_out
        tables.append_jsonl(result, finished)

    gone = {r.mode for r in left_out}
    modes = [m for m in config.modes if m.name not in gone]
    return dataclasses.replace(config, modes=modes, on_workload=record)


def finish(report: BenchReport, out: Path, left: list[str], budget_s: float) -> None:
    """Write bench.json, bench.md, bench.txt and the plots; print the table."""
    tables.write_json(report, out / "bench.json")
    (out / "problems.json").write_text(json.dumps(per_problem(report), indent=1) + "\n")
    tables.write_markdown(report, out / "bench.md")
    _, plot_message = write_plots(report, out)
    text = tables.format_console(report)
    if left:
        names = [n for n in left if not n.startswith("kb:")]
        text += f"\n\nnot run (budget {budget_s:.0f}s spent): {', '.join(left)}"
        if names:
            text += "; run the workloads with\n  kernelpro bench --size full --device cuda "
            text += " ".join(f"--workload {n}" for n in names)
        if len(names) < len(left):
            text += "\n  (the problems: a directory of those files, passed as --problems)"
    (out / "bench.txt").write_text(text + "\n")
    print(plot_message, file=sys.stderr)
    print(text, flush=True)


class Watchdog:
    """Calls `fire(workload, mode)` from a timer thread when one mode's compile outlives
    `limit_s` (None: never)."""

    def __init__(self, limit_s: float | None, fire: Callable[[Workload, str], None]) -> None:
        self.limit_s, self.fire = limit_s, fire

    @contextlib.contextmanager
    def watching(self, workload: Workload, mode: str) -> Iterator[None]:
        """Fire if the block (one mode's compile) outlives the limit."""
        timer = None
        if self.limit_s is not None:
            timer = threading.Timer(self.limit_s, self.fire, (workload, mode))
            timer.daemon = True
            timer.start()
        try:
            yield
        finally:
            if timer is not None:
                timer.cancel()


if __name__ == "__main__":
    code = main()
    # Once (2026-12-06) the run printed its table and then never exited (leaked-semaphore
    # warnings: the shutdown of its worker pools). A shutdown that takes over a minute now dumps
    # every thread's stack to stderr, to say where it hangs, and ends the process with code 1.
    faulthandler.dump_traceback_later(SHUTDOWN_LIMIT_S, exit=True)
    raise SystemExit(code)
