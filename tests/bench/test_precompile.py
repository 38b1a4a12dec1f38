"""scripts/gpu_bench.py --precompile-limit-s on the CPU at tiny size: a mode compiled first in
a child process is timed beside the others with the child's seconds in its compile time, and a
child that runs out of time leaves that mode out of the workload while the others are timed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench(out: Path, limit_s: float) -> dict:
    cmd = [sys.executable, str(ROOT / "scripts" / "gpu_bench.py"), "--device", "cpu"]
    cmd += ["--size", "tiny", "--workload", "softmax", "--modes", "eager,inductor"]
    cmd += ["--precompile", "inductor", "--precompile-limit-s", str(limit_s)]
    env = dict(os.environ, OUT=str(out), PYTHONPATH=str(ROOT))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (workload,) = json.loads((out / "bench.json").read_text())["workloads"]
    return {m["mode"]: m for m in workload["modes"]}


def test_a_precompiled_mode_is_timed_with_the_childs_compile_time(tmp_path: Path) -> None:
    modes = _bench(tmp_path, 300)
    assert modes["eager"]["status"] == modes["inductor"]["status"] == "ok"
    assert modes["inductor"]["median_ms"] > 0
    assert modes["inductor"]["compile_s"] > 1.0  # the child's import and compile are in it


def test_a_child_out_of_time_leaves_only_its_mode_out(tmp_path: Path) -> None:
    modes = _bench(tmp_path, 0.5)
    assert modes["eager"]["status"] == "ok" and modes["eager"]["median_ms"] > 0
    assert modes["inductor"]["status"] == "failed"
    assert "still compiling after" in modes["inductor"]["message"]


def test_no_rounds_is_an_error_as_in_the_cli(tmp_path: Path) -> None:
    cmd = [sys.executable, str(ROOT / "scripts" / "gpu_bench.py"), "--device", "cpu"]
    cmd += ["--size", "tiny", "--workload", "softmax", "--rounds", "0"]
    env = dict(os.environ, OUT=str(tmp_path), PYTHONPATH=str(ROOT))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "--rounds 0: need at least one round" in proc.stderr
    assert not (tmp_path / "bench.json").exists()


_PROBLEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(8, 64)]


def get_init_inputs():
    return []
"""


def test_problems_alone_run_only_the_problems_and_stop_at_the_budget(tmp_path: Path) -> None:
    # as `kernelpro bench`: --problems without --workload runs no built-in workload (a GPU run
    # of 2026-11-27 spent its device time on the built-in ops this way); a problem not started
    # before --budget-s is listed as not run
    problems = tmp_path / "kb"
    problems.mkdir()
    (problems / "L0_1_softmax.py").write_text(_PROBLEM)
    (problems / "L0_2_softmax.py").write_text(_PROBLEM)
    cmd = [sys.executable, str(ROOT / "scripts" / "gpu_bench.py"), "--device", "cpu"]
    cmd += ["--size", "tiny", "--problems", str(problems), "--modes", "eager"]
    for budget, names in (("300", ["kb:L0_1_softmax", "kb:L0_2_softmax"]), ("0", [])):
        out = tmp_path / f"out{budget}"
        env = dict(os.environ, OUT=str(out), PYTHONPATH=str(ROOT))
        proc = subprocess.run(
            [*cmd, "--budget-s", budget], env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        report = json.loads((out / "bench.json").read_text())
        assert [w["workload"] for w in report["workloads"]] == names
        if not names:
            assert "not run (budget 0s spent): kb:L0_1_softmax, kb:L0_2_softmax" in proc.stdout
