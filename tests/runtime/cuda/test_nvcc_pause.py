"""runtime.cuda.compile.nvcc_paused: nvcc runs stopped while something is timed (the warm-up's
in-context check beside background CUTLASS builds), new runs not held back, and a run's timeout
counting only the time it could run. A fake nvcc (a shell script) stands in for the compiler."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from kernelpro_backend.runtime.cuda import compile as cuda_compile

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="job control and /proc: Linux")


def _fake_nvcc(tmp_path: Path, seconds: float) -> Path:
    """An 'nvcc' that records its pid, sleeps, then writes the output file (-o PATH)."""
    fake = tmp_path / "nvcc"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo $$ >> "{tmp_path}/pids"\n'
        f"sleep {seconds}\n"
        'while [ "$1" != "-o" ]; do shift; done\n'
        'echo built > "$2"\n'
    )
    fake.chmod(0o755)
    return fake


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0]


def _wait_for(predicate, seconds: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def _build_in_thread(fake: Path, timeout_s: float, results: list) -> threading.Thread:  # type: ignore[type-arg]
    def build() -> None:
        try:
            results.append(cuda_compile.run_nvcc(str(fake), "// x", [], timeout_s=timeout_s))
        except cuda_compile.CudaCompileError as e:
            results.append(e)

    thread = threading.Thread(target=build, daemon=True)
    thread.start()
    return thread


def _running_build(tmp_path: Path, seconds: float) -> tuple[threading.Thread, list, int]:  # type: ignore[type-arg]
    """A build of a fake nvcc that takes `seconds`, started in a thread: (thread, its result
    list, the fake's pid once it runs)."""
    fake, results = _fake_nvcc(tmp_path, seconds), []
    thread = _build_in_thread(fake, 60, results)
    pids = tmp_path / "pids"
    assert _wait_for(lambda: pids.exists() and pids.read_text().strip())
    return thread, results, int(pids.read_text().split()[0])


def test_a_running_nvcc_is_stopped_during_the_pause_and_finishes_after(tmp_path):
    thread, results, pid = _running_build(tmp_path, 0.5)
    with cuda_compile.nvcc_paused() as stopped:
        assert stopped == 1
        assert _wait_for(lambda: _state(pid) == "T")  # stopped, with its children (sleep)
        time.sleep(1.0)  # longer than the run needs: it must not finish while stopped
        assert thread.is_alive() and not results
    thread.join(30)
    assert results == [b"built\n"]


def test_a_run_started_during_the_pause_is_not_held_back(tmp_path):
    """What the timed code itself needs built (a kernel compiled on first use) must not wait
    for the pause to end: that would never come."""
    fake, results = _fake_nvcc(tmp_path, 0.0), []
    with cuda_compile.nvcc_paused() as stopped:
        assert stopped == 0
        thread = _build_in_thread(fake, 60, results)
        thread.join(30)
        assert results == [b"built\n"]


def test_the_timeout_does_not_count_the_pause(tmp_path):
    """A run of ~0.6 s with a 1.5 s timeout, paused for 2 s: it finishes (the pause moved its
    end); a run that really overruns still times out."""
    fake, results = _fake_nvcc(tmp_path, 0.6), []
    thread = _build_in_thread(fake, 1.5, results)
    assert _wait_for(lambda: (tmp_path / "pids").exists())
    with cuda_compile.nvcc_paused():
        time.sleep(2.0)
    thread.join(30)
    assert results == [b"built\n"]
    (tmp_path / "slow").mkdir()
    slow, late = _fake_nvcc(tmp_path / "slow", 30), []
    thread = _build_in_thread(slow, 0.5, late)
    thread.join(30)
    assert isinstance(late[0], cuda_compile.CudaCompileError) and "ran over" in str(late[0])


def test_a_pause_inside_a_pause_leaves_the_runs_stopped_until_the_outer_one_ends(tmp_path):
    thread, results, pid = _running_build(tmp_path, 0.3)
    with cuda_compile.nvcc_paused() as stopped:
        assert stopped == 1 and _wait_for(lambda: _state(pid) == "T")
        with cuda_compile.nvcc_paused() as inner:
            assert inner == 0
        time.sleep(0.6)  # the inner pause's end let nothing go on
        assert _state(pid) == "T" and not results
    thread.join(30)
    assert results == [b"built\n"]
