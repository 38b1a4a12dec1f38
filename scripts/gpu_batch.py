"""Run a plan of GPU steps in one device call, inside a deadline, and pack the results.

A device call returns at most 8 files and costs minutes to start, so one call runs many steps:

    OUT=/tmp/out python3 scripts/gpu_batch.py scripts/gpu_plans/verify.txt --deadline-s 540

A plan is a text file, one step a line: `name | seconds | shell command` (`#` starts a comment).
Lines ending in `&` run in the background next to the steps that follow (for correctness-only
work such as test groups); `wait` as a command joins them. Each step runs with OUT set to its own
folder `$OUT/work/<name>/`, stdout+stderr in `<name>/log.txt`, and a limit of its own seconds,
never past the deadline (a reserve is kept for packing). At the end everything under
`$OUT/work` is packed into `$OUT/results.tar.gz` and a table (step, exit code, seconds, last
line) is printed and written to `$OUT/summary.txt`: the call returns both even when steps fail.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

RESERVE_S = 15.0  # kept for packing the results after the last step


@dataclass
class Step:
    name: str
    limit_s: float
    command: str
    background: bool = False
    rc: int | None = None
    seconds: float = 0.0
    proc: subprocess.Popen | None = field(default=None, repr=False)
    started: float = 0.0


def parse_plan(text: str) -> list[Step]:
    steps = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line == "wait":
            steps.append(Step("wait", 0.0, "wait"))
            continue
        parts = [p.strip() for p in line.split("|", 2)]
        if len(parts) != 3 or not parts[1].replace(".", "", 1).isdigit():
            raise SystemExit(f"plan line {n}: expected 'name | seconds | command', got {raw!r}")
        name, limit, command = parts
        background = command.endswith("&")
        steps.append(Step(name, float(limit), command.rstrip("&").strip(), background))
    return steps


def last_line(path: Path) -> str:
    try:
        lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return lines[-1][:110] if lines else ""


def start(step: Step, work: Path, deadline: float) -> None:
    folder = work / step.name
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OUT=str(folder), PYTHONUNBUFFERED="1")
    log = open(folder / "log.txt", "w")  # noqa: SIM115 - closed with the process
    step.started = time.time()
    print(
        f"[{time.strftime('%H:%M:%S')}] start {step.name} (limit {step.limit_s:.0f} s)", flush=True
    )
    step.proc = subprocess.Popen(
        ["bash", "-c", step.command], env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    step.limit_s = min(step.limit_s, deadline - step.started)


def finish(step: Step, work: Path, block: bool) -> bool:
    """Reap `step` (kill its process group past its limit). True when it has ended."""
    assert step.proc is not None
    while True:
        rc = step.proc.poll()
        over = time.time() - step.started > step.limit_s
        if rc is None and over:
            os.killpg(step.proc.pid, signal.SIGKILL)
            step.proc.wait()
            rc = 124
        if rc is not None:
            step.rc, step.seconds = rc, time.time() - step.started
            tail = last_line(work / step.name / "log.txt")
            print(f"[{time.strftime('%H:%M:%S')}] end {step.name} rc={rc} {step.seconds:.0f} s | {tail}", flush=True)  # fmt: skip
            return True
        if not block:
            return False
        time.sleep(0.5)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan")
    ap.add_argument("--deadline-s", type=float, default=540.0)
    args = ap.parse_args()
    out = Path(os.environ.get("OUT", "out"))
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    deadline = time.time() + args.deadline_s - RESERVE_S
    steps = parse_plan(Path(args.plan).read_text())
    running: list[Step] = []
    for step in steps:
        if step.command == "wait":
            while running:  # reap each as it ends, so its seconds are its own
                running = [s for s in running if not finish(s, work, block=False)]
                time.sleep(0.5)
            step.rc = 0
            continue
        if time.time() >= deadline - 5:
            print(f"skip {step.name}: no time left before the deadline", flush=True)
            continue
        start(step, work, deadline)
        if step.background:
            running.append(step)
        else:
            finish(step, work, block=True)
        running = [s for s in running if not finish(s, work, block=False)]
    for s in running:
        finish(s, work, block=True)
    rows = [f"{'step':24} {'rc':>4} {'s':>6}  last line"]
    for s in steps:
        if s.command == "wait":
            continue
        rc = "skip" if s.rc is None else str(s.rc)
        rows.append(f"{s.name:24} {rc:>4} {s.seconds:6.0f}  {last_line(work / s.name / 'log.txt')}")
    summary = "\n".join(rows)
    (out / "summary.txt").write_text(summary + "\n")
    with tarfile.open(out / "results.tar.gz", "w:gz") as tar:
        tar.add(work, arcname="results")
    shutil.rmtree(work)
    print("\n" + summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
