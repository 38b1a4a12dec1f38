"""The Nsight Compute tool: profile one launch with hardware counters.

Owns: `run_ncu` (`ncu --clock-control none --csv --page raw` on a command that launches the
kernel between cudaProfilerStart/Stop, retrying without metrics this ncu lacks) and `NcuTool`.
Must not: change clocks (always --clock-control none) or edit kernels; the rules live in
ncu_rules.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .findings import Finding
from .ncu_metrics import (
    ALL_METRICS,
    CORE_METRICS,
    OPTIONAL_METRICS,
    NcuLaunch,
    parse_ncu_csv,
    unknown_metrics,
)
from .ncu_rules import ncu_findings
from .target import ALL_CLASSES, ProfileTarget

# The default of Options.ncu_run_timeout_s: one ncu run (~20 s typical; 10-40 replay passes).
NCU_RUN_TIMEOUT_S = 120.0

__all__ = ["NcuTool", "find_ncu", "ncu_argv", "ncu_findings", "run_ncu"]


def find_ncu() -> str | None:
    found = shutil.which("ncu")
    if found:
        return found
    roots = [Path("/usr/local/cuda/bin"), *sorted(Path("/opt/nvidia/nsight-compute").glob("*"))]
    return next((str(r / "ncu") for r in roots if (r / "ncu").exists()), None)


def ncu_argv(
    ncu: str, command: Sequence[str], metrics: Sequence[str], kernel_regex: str | None
) -> list[str]:
    argv = [ncu, "--clock-control", "none", "--csv", "--page", "raw", "--profile-from-start", "off"]
    argv += ["--launch-count", "1", "--metrics", ",".join(metrics)]
    if kernel_regex:
        argv += ["--kernel-name", f"regex:{kernel_regex}"]
    return argv + list(command)


def run_ncu(
    command: Sequence[str], kernel_regex: str | None = None, timeout_s: float = NCU_RUN_TIMEOUT_S
) -> tuple[str, list[NcuLaunch]]:
    """Profile the first launch (matching `kernel_regex`) inside the command's profiler range.

    Retries without the metrics this ncu does not know, then with the core set only.
    Returns the raw CSV text and the parsed launches."""
    ncu = find_ncu()
    if ncu is None:
        raise RuntimeError("ncu (Nsight Compute) is not on PATH: install it or skip the ncu tool")
    attempts: list[tuple[str, ...]] = [ALL_METRICS]
    text = ""
    while attempts:
        metrics = attempts.pop(0)
        proc = subprocess.run(
            ncu_argv(ncu, command, metrics, kernel_regex),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=child_env(),
        )
        text = proc.stdout + "\n" + proc.stderr
        launches = parse_ncu_csv(proc.stdout)
        if launches:
            return proc.stdout, launches
        bad = unknown_metrics(text, tuple(m for m in metrics if m in OPTIONAL_METRICS))
        if bad and not attempts:
            attempts.append(tuple(m for m in metrics if m not in bad))
        if metrics != CORE_METRICS and not attempts:
            attempts.append(CORE_METRICS)
    raise RuntimeError(
        f"ncu profiled no kernel launch (filter {kernel_regex!r}); its output ends:\n{text[-2000:]}"
    )


class NcuTool:
    name = "ncu"
    applies_to = ALL_CLASSES  # counters say why for every class, latency-bound included
    cost_s = 20.0  # ncu replays the kernel once per counter pass (~10-40 passes)

    def available(self) -> str | None:
        return None if find_ncu() else "ncu is not on PATH"

    def run(self, target: ProfileTarget) -> list[Finding]:
        with tempfile.TemporaryDirectory(prefix="kp_ncu_") as tmp:
            command = list(target.ncu_command or ()) or _launcher_command(target, Path(tmp))
            _, launches = run_ncu(command, target.kernel_name, target.ncu_run_timeout_s)
        return ncu_findings(launches[0], target.knobs, element_bytes=target.element_bytes)


def _launcher_command(target: ProfileTarget, tmp: Path) -> list[str]:
    from .ncu_launcher import write_payload

    if target.fn is None:
        raise ValueError("the ncu tool needs target.fn (picklable) or target.ncu_command")
    payload = write_payload(target.fn, target.inputs, tmp / "payload.pt")
    return [sys.executable, "-m", "kernelpro_backend.profilers.ncu_launcher", str(payload)]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env
