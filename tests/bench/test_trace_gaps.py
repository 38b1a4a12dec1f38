"""bench/trace_gaps.py on a small chrome trace: the GPU's idle gaps between kernels, which
host op launched the kernel after each, and whether the host launched it late."""

from __future__ import annotations

import json

from kernelpro_backend.bench import trace_gaps


def _x(cat: str, name: str, ts: float, dur: float, corr: int | None = None) -> dict:
    event = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}
    if corr is not None:
        event["args"] = {"correlation": corr}
    return event


def test_gaps_name_the_late_launch_and_its_host_op(tmp_path, capsys) -> None:
    events = [
        _x("cpu_op", "Torch-Compiled Region: 0/0", 0, 900),
        _x("cpu_op", "kernelpro::linear_cross_entropy", 50, 300),
        _x("cuda_runtime", "cudaLaunchKernel", 60, 5, 1),
        _x("kernel", "gemm", 100, 400, 1),
        _x("cuda_runtime", "cudaLaunchKernel", 120, 5, 2),  # queued early: no gap
        _x("kernel", "rows", 500, 100, 2),
        _x("cpu_op", "aten::mul", 690, 30),
        _x("cuda_runtime", "cudaLaunchKernel", 700, 5, 3),  # after the GPU went idle at 600
        _x("kernel", "scale", 708, 10, 3),
        {"ph": "i", "name": "marker", "ts": 0},  # not a complete event: ignored
    ]
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    module = trace_gaps
    rows, summary = module.gaps(str(trace), min_us=5.0)
    assert summary["kernels"] == 3 and summary["gpu_busy_us"] == 510
    assert summary["idle_inside_us"] == 108 and summary["host_before_first_kernel_us"] == 100
    (gap,) = rows
    assert gap["idle_us"] == 108 and gap["next"] == "scale" and gap["after"] == "rows"
    assert gap["launched_us_after_idle"] == 100 and gap["launched_by"] == "aten::mul"
    from kernelpro_backend.cli.sweeps import main

    assert main(["trace-gaps", str(trace)]) == 0
    assert '"idle_us": 108' in capsys.readouterr().out
