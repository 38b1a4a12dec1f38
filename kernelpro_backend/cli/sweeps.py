"""`python -m kernelpro_backend.cli.sweeps SWEEP ...`: the command lines of bench/'s sweeps,
for the device machine (each writes its JSON under $OUT when set) or, where said, the CPU.

    OUT=/tmp/out python -m kernelpro_backend.cli.sweeps gemm-sweep [--group square] [--problems kb] \\
        [--autotune TEXT|all] [--search-s 30 --search-only TEXT|all] [--budget-s 560] \\
        [--config BLOCK_N=128,num_warps=4 ...]
    python -m kernelpro_backend.cli.sweeps gemm-sweep --cpu-smoke   # tiny sizes, Triton interpreter
    python -m kernelpro_backend.cli.sweeps gemm-sweep --merge a.json b.json --out merged.json
    OUT=/tmp/out python -m kernelpro_backend.cli.sweeps row-sweep [--budget-s 300] \\
        [--only "softmax fwd"] [--sizes 4096x65536 | full] [--autotune] [--ring] \\
        [--clusters ring] [--seed "num_warps=32"]
    python -m kernelpro_backend.cli.sweeps row-report OUT_DIR RUN.json [RUN.json ...]   # CPU
    OUT=/tmp/out python -m kernelpro_backend.cli.sweeps shapes [--schedule mini_gpt_lengths] \\
        [--warmup-budget-s 20 --patterns softmax,cross_entropy] [--rounds 3] [--tiny] \\
        [--cache-dir DIR [--warmup-only]]   # a warm-up in one run, the timed modes in another
    OUT=/tmp/out python -m kernelpro_backend.cli.sweeps trace --workload moe [--modes inductor,kernelpro]
    python -m kernelpro_backend.cli.sweeps search-report --problems DIR --budget-s 30 --out out/

Owns: each sweep's arguments, the loops that string a sweep's steps together, what they print.
Must not: time, search or report anything its own way (gemm_sweep, row_sweep, row_report,
shapes, trace and search_report do).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _gemm_knobs(text: str) -> dict:
    """'BLOCK_N=128,LOADS=tma,PERSISTENT=True' -> {'BLOCK_N': 128, 'LOADS': 'tma', ...}."""
    out: dict = {}
    for part in filter(None, text.split(",")):
        name, _, value = part.partition("=")
        low = value.strip().lower()
        out[name.strip()] = (
            int(value)
            if value.strip().isdigit()
            else {"true": True, "false": False}.get(low, value.strip())
        )
    return out


def _gemm_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--budget-s", type=float, default=560.0, help="stop starting cases after this")
    p.add_argument("--max-configs", type=int, default=8, help="configs per case, default first")
    p.add_argument("--cpu-smoke", action="store_true", help="tiny sizes, Triton interpreter")
    p.add_argument(
        "--only", action="append", default=[], help="run only cases whose name contains this"
    )
    p.add_argument(
        "--group", action="append", default=[],
        help="square | training | epilogue | kernelbench (repeatable)",
    )  # fmt: skip
    p.add_argument("--problems", help="a KernelBench directory (the kernelbench group)")
    p.add_argument(
        "--autotune", action="append", default=[],
        help="also time max-autotune on cases whose name contains this ('all': every case)",
    )  # fmt: skip
    p.add_argument("--search-s", type=float, default=0.0, help="search budget per case")
    p.add_argument(
        "--search-only", action="append", default=[],
        help="search cases whose name contains this ('all': every case)",
    )  # fmt: skip
    p.add_argument(
        "--config", action="append", default=[], metavar="KNOB=VALUE,...",
        help="also time the default configuration with these knobs changed (timed first; "
        "repeatable), e.g. BLOCK_N=128,num_warps=4,PERSISTENT=True",
    )  # fmt: skip
    p.add_argument("--merge", nargs="+", metavar="JSON", help="merge these runs, run none")
    p.add_argument("--out", help="with --merge: where the merged JSON goes")


def gemm_sweep(a: argparse.Namespace) -> int:
    """cuBLAS, Inductor, max-autotune, the template's seed, its configurations and a search, per
    GEMM case (cases in gemm_cases.py); or merge earlier runs into one table."""
    from ..bench.gemm_sweep import sweep
    from ..bench.gemm_table import merge, table

    if a.merge:
        merged = merge([json.loads(Path(p).read_text()) for p in a.merge])
        if a.out:
            Path(a.out).write_text(json.dumps(merged, indent=1))
        print(table(merged["meta"], merged["results"]))
        return 0
    return sweep(
        a.budget_s, a.max_configs, a.cpu_smoke, a.only, a.group, a.problems,
        a.autotune, a.search_s, a.search_only, [_gemm_knobs(c) for c in a.config],
    )  # fmt: skip


def _row_knobs(text: str) -> tuple[tuple[str, object], ...]:
    """ "num_warps=32 BLOCK_C=2048" -> (("BLOCK_C", 2048), ("num_warps", 32))."""
    out = []
    for part in text.split():
        name, _, value = part.partition("=")
        out.append((name, int(value) if value.lstrip("-").isdigit() else value))
    return tuple(sorted(out))


def _row_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--budget-s", type=float, default=300.0)
    p.add_argument(
        "--only", nargs="*", default=[], help='starts of words of case names ("softmax fwd")'
    )
    p.add_argument(
        "--sizes", nargs="*", default=[], help="ROWSxCOLS, or 'full': 256 ... 512k columns"
    )
    p.add_argument("--autotune", action="store_true", help="also time Inductor's max-autotune")
    p.add_argument("--ring", action="store_true", help="also time the seed's one-knob neighbours")
    p.add_argument(
        "--clusters", choices=("all", "ring", "none"), default="all",
        help="every legal row-resident configuration, the default and its one-knob ring, or "
        "none (the Triton seed and its variants alone)",
    )  # fmt: skip
    p.add_argument(
        "--seed", nargs="*", default=[], help='seed variants to time too ("num_warps=32 ROWS=2")'
    )


def row_sweep(a: argparse.Namespace) -> int:
    """Eager, Inductor and kernelpro's row candidates side by side, per row op and size; several
    runs (a full sweep does not fit one device call) merge with `row-report`."""
    from ..bench.row_sweep import FULL_SIZES, SIZES, SweepSpace, sweep

    if a.sizes == ["full"]:
        sizes = FULL_SIZES
    else:
        pairs = [s.split("x") for s in a.sizes]
        sizes = tuple((int(rows), int(cols)) for rows, cols in pairs) or SIZES
    space = SweepSpace(a.ring, a.clusters, tuple(_row_knobs(k) for k in a.seed))
    return sweep(a.budget_s, tuple(a.only), sizes, a.autotune, space)


def _row_report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("out_dir")
    p.add_argument("runs", nargs="+", help="row-sweep JSON files, oldest first")


def row_report(a: argparse.Namespace) -> int:
    """Merge row-sweep runs, check the [rows] targets, plot one SVG per op, pass and dtype."""
    from ..bench.row_report import write_report

    found = write_report([json.loads(Path(p).read_text()) for p in a.runs], a.out_dir)
    median = found["median_shipped_roof_fraction"]
    print(
        f"{found['cases']} cases, {len(found['missing'])} missing; roof {found['roof_tb_s']} TB/s"
    )
    print(f"median shipped: {median:.1%} of the roof" if median is not None else "no roof")
    print(f"max-autotune timed in {found['max_autotune_timed']} cases")
    for line in found["kernel_lost"]:
        print(f"kernel lost: {line}")
    for line in found["behind_max_autotune"]:
        print(f"behind max-autotune: {line}")
    return 0


def _shapes_args(p: argparse.ArgumentParser) -> None:
    from ..bench.shapes import SCHEDULES

    p.add_argument("--schedule", nargs="*", default=sorted(SCHEDULES))
    p.add_argument("--warmup-budget-s", type=float, default=0.0, help="0: no warm-up")
    p.add_argument("--patterns", default="", help="warm up only these subgraph patterns")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--warmup-only", action="store_true", help="fill --cache-dir and stop")


def shapes(a: argparse.Namespace) -> int:
    """Training loops whose shapes change: eager vs Inductor vs kernelpro (cache-only, after an
    optional warm-up over the same shapes), side by side."""
    import torch

    from ..bench.shapes import SCHEDULES, run_schedule, table
    from ..warmup.offline import warmup

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    options = {"cache_dir": a.cache_dir or tempfile.mkdtemp(prefix="kernelpro-shapes-")}
    rows = []
    for name in a.schedule:
        schedule = SCHEDULES[name](device, a.tiny)
        if a.warmup_budget_s > 0:
            warm = {**options, **({"search_patterns": a.patterns} if a.patterns else {})}
            report = warmup(
                schedule.model, schedule.steps[0], more_inputs=schedule.steps[1:],
                budget_s=a.warmup_budget_s, loss_fn=lambda out: out, options=warm,
            )  # fmt: skip
            print(report.table(), flush=True)
        if a.warmup_only:
            continue
        rows += run_schedule(schedule, rounds=a.rounds, options=options)
        print(table(rows), flush=True)
    if os.environ.get("OUT"):
        out = Path(os.environ["OUT"]) / "shapes-bench.json"
        out.write_text(json.dumps([dataclasses.asdict(r) for r in rows], indent=1))
    print(table(rows))
    return 0


def _trace_args(p: argparse.ArgumentParser) -> None:
    from ..bench.workloads import WORKLOADS

    p.add_argument("--workload", required=True, choices=list(WORKLOADS))
    p.add_argument("--modes", default="inductor,kernelpro")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--device", default="cuda", help="cpu: smoke-test at tiny size")


def trace(a: argparse.Namespace) -> int:
    """What differs between two modes' training steps, kernel by kernel."""
    from ..bench.trace import run_trace

    return run_trace(a.workload, a.modes, a.steps, a.device)


def _search_report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--problems", help="a directory of KernelBench-format files")
    p.add_argument("--only", default="", help="comma-separated substrings of problem names")
    p.add_argument("--workloads", default="", help="comma-separated bench workloads (train)")
    p.add_argument("--budget-s", type=float, default=30.0)
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--out", required=True)


def _write_search_report(out: Path, walls: dict[str, float]) -> dict:
    """The report over every search log so far (rewritten after each problem, so a run cut
    by its time limit still leaves one)."""
    import torch

    from ..bench.search_report import report, summarize_logs

    logs = sorted((out / "cache" / "logs").glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
    data = report(summarize_logs(logs))
    data["warmup_wall_s"] = walls
    data["device"] = torch.cuda.get_device_name()
    (out / "search-report.json").write_text(json.dumps(data, indent=1, default=str))
    return data


def search_report(a: argparse.Namespace) -> int:
    """Search every subgraph of KernelBench problems (and bench workloads) into a fresh cache,
    then report trials, depth, fixed costs and where a trial's time goes."""
    import torch

    from ..bench.problems import load_problem, problem_files
    from ..bench.search_report import table
    from ..bench.workloads import WORKLOADS
    from ..tuner.searcher import release_gpu_memory
    from ..warmup.offline import warmup

    out = Path(a.out)
    options: dict[str, Any] = {"cache_dir": str(out / "cache"), "progress": False}
    if a.workers:
        options["workers"] = a.workers
    device = torch.device("cuda")
    walls: dict[str, float] = {}
    only = [s for s in a.only.split(",") if s]
    for path in problem_files(a.problems) if a.problems else []:
        if only and not any(s in path.stem for s in only):
            continue
        started = time.perf_counter()
        try:
            work = load_problem(path, device)
            warmup(work.model, work.inputs, train=False, budget_s=a.budget_s, options=options,
                   release_workers=False)  # fmt: skip
        except Exception as e:  # one problem's failure is reported, the others still run
            print(f"{path.stem}: FAILED {type(e).__name__}: {e}", flush=True)
        walls[path.stem] = round(time.perf_counter() - started, 1)
        print(f"{path.stem}: {walls[path.stem]} s", flush=True)
        _write_search_report(out, walls)
        work = None  # type: ignore[assignment]
        torch.cuda.empty_cache()
    for name in [w for w in a.workloads.split(",") if w]:
        started = time.perf_counter()
        work = WORKLOADS[name](device, None, "full")
        warmup(work.model, work.inputs, budget_s=a.budget_s, loss_fn=work.loss_fn,
               options=options, release_workers=False)  # fmt: skip
        walls[name] = round(time.perf_counter() - started, 1)
        print(f"{name}: {walls[name]} s", flush=True)
        _write_search_report(out, walls)
    release_gpu_memory()
    print(table(_write_search_report(out, walls)))
    return 0


def _stop_replay_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("sources", nargs="+", help="search log directories or a saved JSON")
    p.add_argument("--save", help="write the trajectories here")


def stop_replay(a: argparse.Namespace) -> int:
    """Replay recorded searches under today's stop rules (CPU)."""
    from ..bench.stop_replay import replay_report

    return replay_report([Path(s) for s in a.sources], a.save)


def _trace_gaps_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace")
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--min-us", type=float, default=5.0)


def trace_gaps(a: argparse.Namespace) -> int:
    """The GPU's idle gaps inside a profiler trace's compiled regions (CPU)."""
    from ..bench.trace_gaps import gaps

    rows, summary = gaps(a.trace, a.min_us)
    print(json.dumps(summary))
    for row in sorted(rows, key=lambda r: -r["idle_us"])[: a.top]:
        print(json.dumps(row))
    return 0


SWEEPS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Callable[..., int]]] = {
    "gemm-sweep": (_gemm_args, gemm_sweep),
    "row-sweep": (_row_args, row_sweep),
    "row-report": (_row_report_args, row_report),
    "shapes": (_shapes_args, shapes),
    "trace": (_trace_args, trace),
    "search-report": (_search_report_args, search_report),
    "stop-replay": (_stop_replay_args, stop_replay),
    "trace-gaps": (_trace_gaps_args, trace_gaps),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kernelpro_backend.cli.sweeps", description=__doc__.split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="sweep", required=True)
    for name, (add_args, run) in SWEEPS.items():
        add_args(sub.add_parser(name, help=" ".join((run.__doc__ or "").split())))
    args = parser.parse_args(argv)
    return SWEEPS[args.sweep][1](args)


if __name__ == "__main__":
    sys.exit(main())
